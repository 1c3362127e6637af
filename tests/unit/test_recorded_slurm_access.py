"""`gantry status` / `gantry cancel` reach a job's Slurm through what request.json recorded
at submit (launcher/site_slurm.slurm_access, launcher.slurm.recorded_client), without loading
the site config again."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from launcher.slurm import CliSlurmClient, recorded_client

REPO = Path(__file__).resolve().parents[2]

PROGRAM = """
import json, sys
from pathlib import Path
from launcher.job_dir import JobDir
from launcher.job_state import client_for_job
client = client_for_job(JobDir(Path(sys.argv[1])))
env = client.runner.env or {}
print(json.dumps([type(client).__name__, env.get("SLURM_CONF"),
                  "launcher.site_config" in sys.modules, "yaml" in sys.modules]))
"""


def _client_of(job: Path, env: dict[str, str]) -> list[object]:
    done = subprocess.run([sys.executable, "-c", PROGRAM, str(job)], capture_output=True,
                          text=True, cwd=REPO, env=env, check=True, timeout=60)
    return list(json.loads(done.stdout))


def test_status_uses_the_recorded_client_and_conf(tmp_path: Path) -> None:
    conf = tmp_path / "slurm.conf"
    conf.write_text("ClusterName=x\n", encoding="utf-8")
    job = tmp_path / "job"
    job.mkdir()
    (job / "request.json").write_text(json.dumps({
        "site_path": str(tmp_path / "missing-site.yaml"),
        "slurm": {"client": "cli", "slurm_conf": str(conf)}}), encoding="utf-8")
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(REPO)}
    assert _client_of(job, env) == ["CliSlurmClient", str(conf), False, False]
    # A SLURM_CONF the user set wins, as for the site's own environment.
    assert _client_of(job, {**env, "SLURM_CONF": "/etc/other.conf"})[1] is None


def test_a_recorded_conf_that_is_gone_is_not_used(tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SLURM_CONF", raising=False)
    client = recorded_client({"client": "cli", "slurm_conf": str(tmp_path / "gone.conf")})
    assert isinstance(client, CliSlurmClient) and client.runner.env is None
    conf = tmp_path / "here.conf"
    conf.write_text("", encoding="utf-8")
    client = recorded_client({"client": "cli", "slurm_conf": str(conf)})
    assert isinstance(client, CliSlurmClient)
    assert client.runner.env is not None and client.runner.env["SLURM_CONF"] == str(conf)
