"""Slurm's own conventions, decided by the real embedded Slurm: its time-limit formats (gantry
accepts exactly what sbatch accepts and reads the same limit) and per-job sbatch options
(they reach the job as Slurm records it).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from launcher.cluster.jobs import parse_show_job
from launcher.job_spec import JobSpec
from launcher.slurm_time import time_limit_minutes
from launcher.typed_config import from_mapping
from tests.embedded_cluster import EmbeddedCluster

ACCEPTED = ["30", "90", "00:30", "0:90", "2:30", "01:00:00", "1:30:00", "1-12", "1-12:30",
            "2-00:00:05", "0-0:0:59", "1-0"]
"""Each of Slurm's six formats, with unbounded fields and seconds that round up."""
REFUSED = ["1:2:3:4", "1-2-3", "1-2:3:4:5", "1h", "1.5", ":30", "30:", " 30", "1-:30"]
"""Refused by gantry and by sbatch."""
NOT_A_FORMAT = ["-5", "1-", "0", "UNLIMITED"]
"""Refused by gantry although sbatch's parser takes them: none of Slurm's documented formats
("-5", "1-"), or no limit at all ("0", "UNLIMITED": gantry's USR1 before the end needs one)."""


def show_job(cluster: EmbeddedCluster, job_id: str) -> dict[str, str]:
    return parse_show_job(cluster.run("scontrol", "show", "job", "-o", job_id).stdout)


def slurm_minutes(time_limit: str) -> int:
    """scontrol's TimeLimit ([D-]HH:MM:SS) in minutes."""
    days, _, clock = time_limit.rpartition("-")
    hours, minutes, seconds = (int(part) for part in clock.split(":"))
    assert seconds == 0, time_limit
    return int(days or 0) * 1440 + hours * 60 + minutes


@pytest.mark.parametrize("text", ACCEPTED)
def test_a_time_gantry_accepts_is_the_limit_slurm_sets(embedded_cluster: EmbeddedCluster,
                                                       text: str) -> None:
    from_mapping(JobSpec, {"name": "j", "resources": {"time_limit": text}}, "job.yaml")
    test_only = embedded_cluster.run("sbatch", "--test-only", "-N1", f"--time={text}",
                                     "--wrap=true", check=False)
    assert test_only.returncode == 0, test_only.stderr
    job_id = embedded_cluster.sbatch("--hold", "-N1", f"--time={text}", "--wrap=true")
    try:
        shown = show_job(embedded_cluster, job_id)["TimeLimit"]
    finally:
        embedded_cluster.scancel(job_id)
    assert slurm_minutes(shown) == time_limit_minutes(text), (text, shown)


@pytest.mark.parametrize("text", REFUSED)
def test_a_time_gantry_refuses_slurm_refuses(embedded_cluster: EmbeddedCluster,
                                             text: str) -> None:
    with pytest.raises(Exception, match=r"resources\.time_limit"):
        from_mapping(JobSpec, {"name": "j", "resources": {"time_limit": text}}, "job.yaml")
    test_only = embedded_cluster.run("sbatch", "--test-only", "-N1", f"--time={text}",
                                     "--wrap=true", check=False)
    assert test_only.returncode != 0, (text, test_only.stderr)


@pytest.mark.parametrize("text", NOT_A_FORMAT)
def test_a_time_slurm_tolerates_but_documents_not_is_refused(text: str) -> None:
    with pytest.raises(Exception, match=r"resources\.time_limit"):
        from_mapping(JobSpec, {"name": "j", "resources": {"time_limit": text}}, "job.yaml")


def gantry(cluster: EmbeddedCluster, cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**cluster.env, "GANTRY_JOBS_DIR": str(cwd / "jobs")}
    return subprocess.run([sys.executable, "-m", "launcher", *args], capture_output=True,
                          text=True, cwd=cwd, env=env, timeout=120, check=False)


def test_per_job_options_and_short_flags_reach_the_job(embedded_cluster: EmbeddedCluster,
                                                       tmp_path: Path) -> None:
    job = tmp_path / "opts.yaml"
    job.write_text("name: opts\nmodel: {n_layer: 2, n_head: 2, n_embd: 8}\n"
                   "parallelism: {pp: 1, dp: 1}\npolicy: {preflight_level: 'off'}\n"
                   "resources: {sbatch_options: ['--comment=from-the-job-file', '--mem=5M']}\n")
    result = gantry(embedded_cluster, tmp_path, "submit", str(job), "--site",
                    str(embedded_cluster.site_path), "--json", "-t", "1-12", "-N", "1",
                    "--mem", "10M", "--exclusive", "--sbatch-option=--hold")
    assert result.returncode == 0, result.stderr
    job_id = json.loads(result.stdout)["job_id"]
    try:
        shown = show_job(embedded_cluster, job_id)
    finally:
        embedded_cluster.scancel(job_id)
    assert shown["TimeLimit"] == "1-12:00:00"
    assert shown["Comment"] == "from-the-job-file"
    assert shown["MinMemoryNode"] == "10M"  # the CLI's --mem replaced the file's
    assert shown["OverSubscribe"] == "NO"  # --exclusive
    assert shown["Reason"] == "JobHeldUser"

