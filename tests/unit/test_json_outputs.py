"""`--json` on the commands that report what they did: preflight-scripts, site
install-plugins, cluster down (the embedded cluster test covers cluster up)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
LOCAL_SITE = REPO / "site_configs" / "local.yaml"


def gantry_json(tmp_path: Path, *args: str) -> Any:
    env = {**os.environ, "GANTRY_RUN_DIR": str(tmp_path / "run"),
           "PYTHONPATH": str(REPO)}
    result = subprocess.run([sys.executable, "-m", "launcher", *args, "--json"],
                            capture_output=True, text=True, cwd=tmp_path, env=env,
                            timeout=120, check=False)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def test_preflight_scripts_json(tmp_path: Path) -> None:
    out = tmp_path / "scripts"
    data = gantry_json(tmp_path, "preflight-scripts", str(out), "--site", str(LOCAL_SITE))
    assert [s["kind"] for s in data["scripts"]] == ["healthcheck", "prolog", "epilog"]
    for script in data["scripts"]:
        assert Path(script["path"]).is_file() and Path(script["path"]).parent == out
        assert any(line.endswith(f"={script['path']}") for line in script["slurm_conf"])


def test_site_install_plugins_dry_run_json(tmp_path: Path) -> None:
    data = gantry_json(tmp_path, "site", "install-plugins", "--site", str(LOCAL_SITE),
                       "--prefix", str(tmp_path / "plugins"), "--dry-run")
    assert data["dry_run"] is True and data["files"] and data["slurm_conf_lines"]
    assert all(path.startswith(str(tmp_path / "plugins")) for path in data["files"])
    assert not (tmp_path / "plugins").exists()


def test_cluster_down_json_when_not_running(tmp_path: Path) -> None:
    data = gantry_json(tmp_path, "cluster", "down", "--site", str(LOCAL_SITE))
    assert data["was_running"] is False and data["run_dir"] == str(tmp_path / "run")
    assert set(data["daemons"].values()) <= {"not running"}
