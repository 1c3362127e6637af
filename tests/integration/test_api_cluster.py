"""The Python API on the real embedded Slurm: a trainer job submitted with `api.submit`,
waited for, its state, log and result paths; a second job cancelled through `Job.cancel`;
the CLI's `gantry status --json` and `gantry logs` agree with the API on both."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from launcher import api
from tests.embedded_cluster import EmbeddedCluster


@pytest.fixture
def cluster(embedded_cluster: EmbeddedCluster) -> Any:
    yield embedded_cluster
    embedded_cluster.cancel_all()


def gantry(cluster: EmbeddedCluster, jobs: Path, *args: str) -> str:
    done = subprocess.run([sys.executable, "-m", "launcher", *args, "--jobs-dir", str(jobs)],
                          capture_output=True, text=True, env=cluster.env, timeout=120,
                          check=False)
    assert done.returncode == 0, done.stderr
    return done.stdout


def cli_state(cluster: EmbeddedCluster, jobs: Path, job: api.Job) -> Any:
    return json.loads(gantry(cluster, jobs, "status", job.job_id, "--json"))["state"]


def test_submit_wait_logs_result_and_cancel(cluster: EmbeddedCluster, tmp_path: Path) -> None:
    jobs = tmp_path / "jobs"
    spec = tmp_path / "tiny.yaml"
    spec.write_text("name: api-tiny\nmodel: {n_layer: 2, n_head: 2, n_embd: 8}\n"
                    "parallelism: {pp: 2, dp: 1, micro_batches: 2}\n"
                    "train: {steps: 4}\ncheckpoint: {dir: checkpoints, interval: 2}\n"
                    "resources: {nodes: 1, time_limit: '5'}\n"
                    "policy: {preflight_level: 'off'}\n")
    job = api.submit(spec, cluster.site_path, jobs_dir=jobs, nodes=2,
                     env={"OMP_NUM_THREADS": "1"})
    assert api.Job.attach(job.job_id, jobs_dir=jobs) == job
    assert job.state() in {"PENDING", "RUNNING", "COMPLETED"}
    assert job.wait(timeout=240, poll_s=0.5) == "COMPLETED"
    assert job.state() == cli_state(cluster, jobs, job) == "COMPLETED"
    row = job.status()
    assert row == json.loads(gantry(cluster, jobs, "status", job.job_id, "--json"))
    assert row["exit_code"] == 0 and row["stale"] is False

    log = job.logs()
    assert "training finished" in log and log == gantry(cluster, jobs, "logs", job.job_id)
    result = job.result
    assert result.job_dir == job.job_dir and result.log is not None
    assert result.metrics is not None and result.trace is not None
    for path in (result.job_dir, result.log, result.metrics, result.trace,
                 result.checkpoint_dir, result.latest_checkpoint, *result.attempt_dirs):
        assert path is not None and path.exists(), path
    assert [json.loads(line)["step"] for line in result.metrics.read_text().splitlines()] \
        == [1, 2, 3, 4]
    assert result.checkpoint_dir is not None
    assert result.latest_checkpoint == result.checkpoint_dir / "step_00000004"
    assert len(result.attempt_dirs) == 1

    sleeper = api.submit(spec, cluster.site_path, jobs_dir=jobs, name="api-sleeper", nodes=2,
                         command=["sleep", "300"])
    assert sleeper.job_id != job.job_id
    done = sleeper.cancel()
    assert done == {"job_id": sleeper.job_id, "name": "api-sleeper",
                    "job_dir": str(sleeper.job_dir), "action": "cancel"}
    assert sleeper.wait(timeout=60, poll_s=0.5) == "CANCELLED"
    assert sleeper.state() == cli_state(cluster, jobs, sleeper) == "CANCELLED"
    assert sleeper.result.metrics is None  # a command job runs no gantry train
