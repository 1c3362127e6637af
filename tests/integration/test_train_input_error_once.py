"""A bad job file given to `gantry train` under mpirun and under srun: every rank reads the
same file and finds the same error, and the job's log gets it once (rank 0's), with exit
status 2 from every rank."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.embedded_cluster import EmbeddedCluster
from tests.integration.pipeline_helpers import MPI_ENV, REPO

pytestmark = pytest.mark.slow


def test_a_bad_job_file_is_reported_once_under_mpirun(tmp_path: Path) -> None:
    job = tmp_path / "job.yaml"
    job.write_text("name: bad\nmodel: {layers: two}\n", encoding="utf-8")
    cmd = ["mpirun", "--oversubscribe", "-np", "3", sys.executable, "-m", "launcher", "train",
           str(job), "--run-dir", str(tmp_path / "run")]
    path = os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH", "")]))
    env = {**os.environ, **MPI_ENV, "PYTHONPATH": path}
    result = subprocess.run(cmd, capture_output=True, text=True, check=False, env=env,
                            cwd=REPO, timeout=120)
    errors = [line for line in (result.stdout + result.stderr).splitlines()
              if line.startswith("error:")]
    assert len(errors) == 1, result.stdout + result.stderr
    assert str(job) in errors[0] and "layers" in errors[0], errors
    assert result.returncode == 2, result.stderr[-2000:]
    assert not (tmp_path / "run").exists()


def test_a_bad_job_file_under_srun_exits_2_not_killed(embedded_cluster: EmbeddedCluster,
                                                      tmp_path: Path) -> None:
    """Under srun --kill-on-bad-exit (the batch script's launch) srun ends the ranks that wait
    for rank 0's report with TERM: they still exit 2, so the step reads as bad input (final),
    never as a rank killed by a signal (which would be recovered and blame a node)."""
    job = tmp_path / "job.yaml"
    job.write_text("name: bad\nmodel: {layers: two}\n", encoding="utf-8")
    path = os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH", "")]))
    result = subprocess.run(
        ["srun", "-N2", "-n4", "--kill-on-bad-exit=1", sys.executable, "-m", "launcher",
         "train", str(job), "--run-dir", str(tmp_path / "run")],
        capture_output=True, text=True, check=False, cwd=REPO, timeout=120,
        env={**embedded_cluster.env, "PYTHONPATH": path})
    errors = [line for line in (result.stdout + result.stderr).splitlines()
              if line.startswith("error:")]
    assert result.returncode == 2, result.stdout + result.stderr
    assert len(errors) == 1 and "layers" in errors[0], result.stdout + result.stderr
    assert "Terminated" not in result.stderr and "Killed" not in result.stderr, result.stderr
