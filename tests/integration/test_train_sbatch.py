"""The trainer through a generated sbatch script on the embedded cluster (issue 3 "Done when").

`gantry submit job.yaml --follow` with no command: gantry plans the nodes on the live cluster,
builds the native library for the site (cached), renders a script whose launch step is
`srun --mpi=pmix ... gantry train <job dir>/spec.yaml --run-dir <job dir>/runs/<name>
--lib ... --rank-order ... --resume`, and follows it. The losses of the run must
equal the PyTorch reference trained on the same global batches from the same weights
(relative 1e-5, fp32), for pp=2 and dp=2 x pp=2. A requeue continues from the newest
checkpoint (`--resume`) and reproduces the uninterrupted losses bit-exactly.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from launcher.placement_record import read_placement_record
from tests.embedded_cluster import EmbeddedCluster
from tests.integration.pipeline_helpers import ODD_MODEL, reference_losses
from tests.integration.sbatch_train_run import SEED, SETTINGS, STEPS, TRAIN

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def build_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One native build per module (the first submit builds it, the others find it)."""
    return tmp_path_factory.mktemp("build-cache")


@pytest.fixture
def cluster(embedded_cluster: EmbeddedCluster) -> Any:
    yield embedded_cluster
    embedded_cluster.cancel_all()


def gantry(cluster: EmbeddedCluster, cwd: Path, cache: Path, *args: str,
           timeout: float = 400) -> subprocess.CompletedProcess[str]:
    env = {**cluster.env, "GANTRY_JOBS_DIR": str(cwd / "jobs"), "GANTRY_BUILD_CACHE": str(cache)}
    return subprocess.run([sys.executable, "-m", "launcher", *args], capture_output=True,
                          text=True, cwd=cwd, env=env, timeout=timeout, check=False)


def write_job(directory: Path, name: str, pp: int, dp: int, m: int, spares: int) -> Path:
    """A job whose init weights path is relative to the job file (copied into the job dir
    as an absolute path) and whose checkpoints land in the job directory."""
    body = {
        "name": name,
        "model": ODD_MODEL,
        "parallelism": {"pp": pp, "dp": dp, "schedule": "1f1b", "micro_batches": m,
                        "micro_batch_size": 2},
        "train": {**TRAIN, "init_weights": "init.safetensors"},
        "resources": {"nodes": pp * dp, "spares": spares, "time_limit": "00:10:00"},
        "checkpoint": {"dir": "checkpoints", "interval": 2, "keep": 2},
        "policy": {"preflight_level": "off"},
        "env": {"OMP_NUM_THREADS": "1"},
    }
    path = directory / f"{name}.yaml"
    path.write_text(yaml.safe_dump(body, sort_keys=False))
    return path


def metrics(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines()]


def submit_follow(cluster: EmbeddedCluster, tmp_path: Path, cache: Path,
                  job: Path) -> tuple[str, Path]:
    result = gantry(cluster, tmp_path, cache, "submit", str(job), "--site",
                    str(cluster.site_path), "--follow")
    assert result.returncode == 0, (result.stdout[-3000:], result.stderr[-3000:])
    assert "training finished" in result.stdout
    job_id = result.stdout.split()[2]
    job_dir = Path(result.stdout.split(": ", 1)[1].splitlines()[0])
    return job_id, job_dir


@pytest.mark.parametrize("pp,dp,m", [(2, 1, 4), (2, 2, 2)], ids=["pp2", "dp2-pp2"])
def test_submit_follow_trains_like_pytorch(cluster: EmbeddedCluster, tmp_path: Path,
                                           build_cache: Path, pp: int, dp: int,
                                           m: int) -> None:
    expected = reference_losses(dp * m, 2, tmp_path / "init.safetensors", SETTINGS, SEED)
    job = write_job(tmp_path, f"train-pp{pp}-dp{dp}", pp, dp, m, spares=1)
    job_id, job_dir = submit_follow(cluster, tmp_path, build_cache, job)

    placement = json.loads((job_dir / "placement.json").read_text())
    assert placement["mode"] == "planned"
    record = read_placement_record(job_dir / "placement.json")
    planned = list(record.rank_nodes)
    assert len(planned) == pp * dp and len(record.spare_nodes) == 1
    assert json.loads((job_dir / "rank_order.json").read_text()) == planned
    attempt = job_dir / "runs" / f"{job_id}-0"
    assert (attempt / "launch_nodes").read_text().strip() == ",".join(planned)
    script = (job_dir / "job.sbatch").read_text()
    run_dir = job_dir / "runs" / job.stem
    assert f"train {job_dir / 'spec.yaml'} --run-dir {run_dir} --lib {build_cache}" in script
    assert f"--rank-order {job_dir / 'rank_order.json'} --resume\n" in script

    records = metrics(run_dir / "metrics.jsonl")
    assert [r["step"] for r in records] == list(range(1, STEPS + 1))
    assert [r["loss"] for r in records] == pytest.approx(expected, rel=1e-5)
    assert len(records[0]["ranks"]) == pp * dp
    assert (run_dir / "trace.json").is_file()
    steps = sorted(p.name for p in (job_dir / "checkpoints").iterdir())
    assert steps == ["step_00000004", "step_00000006"]  # keep: 2


def test_requeue_resumes_from_the_newest_checkpoint(cluster: EmbeddedCluster, tmp_path: Path,
                                                    build_cache: Path) -> None:
    reference_losses(2, 2, tmp_path / "init.safetensors", SETTINGS, SEED)
    job = write_job(tmp_path, "train-resume", 2, 1, 2, spares=0)
    job_id, job_dir = submit_follow(cluster, tmp_path, build_cache, job)
    run_dir = job_dir / "runs" / job.stem
    first = metrics(run_dir / "metrics.jsonl")
    assert [r["step"] for r in first] == list(range(1, STEPS + 1))
    # Lose the last checkpoint: the restart must resume from step 4 and redo steps 5-6.
    shutil.rmtree(job_dir / "checkpoints" / "step_00000006")
    cluster.run("scontrol", "requeue", job_id)
    cluster.release_requeued(job_id)
    deadline = time.monotonic() + 300
    while not (job_dir / "runs" / f"{job_id}-1").is_dir() or \
            cluster.job(job_id).state != "COMPLETED":
        assert time.monotonic() < deadline, cluster.job(job_id)
        time.sleep(1)
    # Steps 5-6 of the first attempt were set aside; the resumed ones replace them bit-exactly.
    replayed = metrics(run_dir / "metrics.replayed.jsonl")
    assert [r["step"] for r in replayed] == [5, 6]
    final = metrics(run_dir / "metrics.jsonl")
    assert [r["step"] for r in final] == list(range(1, STEPS + 1))
    assert [r["loss"] for r in final] == [r["loss"] for r in first]  # bit-exact
    assert [r["loss"] for r in replayed] == [r["loss"] for r in first[4:]]
    log = (job_dir / "logs" / f"slurm-{job_id}.out").read_text()
    assert "restart 1 of at most" in log

    status = gantry(cluster, tmp_path, build_cache, "status", job_id, "--json")
    assert status.returncode == 0, status.stderr
    info = json.loads(status.stdout)
    assert info["restarts"] == 1
    assert info["attempts"] == [f"{job_id}-0", f"{job_id}-1"]
    assert info["checkpoint_dir"] == str(job_dir / "checkpoints")
    assert info["latest_checkpoint_step"] == 6
    plain = gantry(cluster, tmp_path, build_cache, "status", job_id)
    assert f"checkpoints {job_dir / 'checkpoints'} (latest: step 6)" in plain.stdout
