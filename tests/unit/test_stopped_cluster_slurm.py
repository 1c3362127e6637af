"""An embedded cluster stopped by `gantry cluster down` leaves its slurm.conf in the run dir:
gantry must not ask that conf's (absent) slurmctld, so that planning and rendering go on
without Slurm as for a cluster never started, and a command that needs Slurm says the
cluster is not running."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from launcher.cluster.layout import RunLayout
from launcher.site_config import DEFAULT_SITE, load_site
from launcher.site_slurm import site_slurm_env, slurm_conf_problem

REPO = Path(__file__).resolve().parents[2]


def _stopped_cluster(run_dir: Path, monkeypatch: pytest.MonkeyPatch) -> RunLayout:
    monkeypatch.delenv("SLURM_CONF", raising=False)
    monkeypatch.setenv("GANTRY_RUN_DIR", str(run_dir))
    layout = RunLayout(run_dir)
    layout.slurm_conf.parent.mkdir(parents=True)
    layout.slurm_conf.write_text("ClusterName=gone\n", encoding="utf-8")
    layout.pid_dir.mkdir(parents=True, exist_ok=True)
    # A slurmctld record whose process is long gone (pid 1 never has this start time).
    (layout.pid_dir / "slurmctld.pid").write_text(json.dumps(
        {"daemon": "slurmctld", "pid": 1, "start_time": 1, "argv": ["slurmctld"]}))
    return layout


def test_a_stopped_clusters_conf_is_not_used(tmp_path: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    _stopped_cluster(tmp_path / "run", monkeypatch)
    site = load_site(DEFAULT_SITE)
    assert site_slurm_env(site) is None
    problem = slurm_conf_problem(site)
    assert problem is not None and "is not running" in problem and "cluster up" in problem


def test_render_plans_without_a_stopped_cluster(tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    _stopped_cluster(tmp_path / "run", monkeypatch)
    out = tmp_path / "job.sbatch"
    done = subprocess.run([sys.executable, "-m", "launcher", "render",
                           "examples/gpt2-tiny-pp2-dp2.yaml", "-o", str(out)],
                          capture_output=True, text=True, cwd=REPO, timeout=120,
                          env={**os.environ}, check=False)
    assert done.returncode == 0, done.stderr
    assert out.read_text(encoding="utf-8").startswith("#!/bin/bash")
