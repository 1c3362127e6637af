"""The trainer's resilience under mpirun (no Slurm): background checkpoints hold exactly the
tensors of synchronous ones (the one from reused staging arrays, the other from fresh copies;
events.jsonl names each save's bytes and phase times) and overlap up to
checkpoint.max_lag_steps steps, SIGUSR1 stops every rank at one step after a checkpoint (exit
75) and the resume is bit-exact, so does an eviction request (exit 78), a hung rank is
aborted by the watchdog (exit 76), bad hook values are one-line errors."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from safetensors import safe_open

from launcher.job_exit_codes import TRAINER_EVICTED, TRAINER_HUNG, TRAINER_STOPPED
from launcher.recovery.evictions import request_eviction
from launcher.train.checkpoint import matches
from tests.integration.pipeline_helpers import MPI_ENV, REPO, gantry_train, read_metrics, write_job
from tests.native.conftest import build_native

pytestmark = pytest.mark.slow

MODEL = {"n_layer": 3, "n_head": 2, "n_embd": 8, "vocab_size": 40, "seq_len": 5}


@pytest.fixture(scope="module")
def lib() -> Path:
    return build_native(REPO / "native" / "build")


def _job(directory: Path, *, async_write: bool = True, policy: dict[str, object] | None = None,
         pinned_staging: bool = True) -> Path:
    path = write_job(directory, "res", pp=2, dp=1, schedule="1f1b", m=2, model=MODEL,
                     checkpoint={"dir": str(directory / "ckpt"), "interval": 2, "keep": 3,
                                 "async_write": async_write, "pinned_staging": pinned_staging})
    if policy:
        import yaml

        body = yaml.safe_load(path.read_text())
        body["policy"] = policy
        path.write_text(yaml.safe_dump(body))
    return path


def _trajectory(run_dir: Path) -> list[tuple[int, float, float]]:
    return [(r["step"], r["loss"], r["grad_norm"]) for r in read_metrics(run_dir)]


@pytest.fixture(scope="module")
def sync_run(tmp_path_factory: pytest.TempPathFactory, lib: Path) -> Path:
    root = tmp_path_factory.mktemp("sync")
    # synchronous, from fresh host copies at every save (checkpoint.pinned_staging false)
    result = gantry_train(_job(root, async_write=False, pinned_staging=False), 2, lib,
                          run_dir=root / "run")
    assert result.returncode == 0, result.stderr[-3000:]
    return root


def test_async_checkpoints_equal_sync_ones(sync_run: Path, lib: Path, tmp_path: Path) -> None:
    result = gantry_train(_job(tmp_path), 2, lib, run_dir=tmp_path / "run")
    assert result.returncode == 0, result.stderr[-3000:]
    assert _trajectory(tmp_path / "run") == _trajectory(sync_run / "run")
    steps = sorted(p.name for p in (tmp_path / "ckpt").iterdir())
    assert steps == ["step_00000006", "step_00000008", "step_00000010"]
    assert steps == sorted(p.name for p in (sync_run / "ckpt").iterdir())
    for step in steps:  # same tensors and metadata (the header's key order is not fixed)
        for stage in ("stage_000", "stage_001"):
            ours, theirs = (root / "ckpt" / step / f"{stage}.safetensors"
                            for root in (tmp_path, sync_run))
            with safe_open(str(ours), "np") as a, safe_open(str(theirs), "np") as b:
                assert a.metadata() == b.metadata() and set(a.keys()) == set(b.keys())
                for key in a.keys():  # noqa: SIM118 (safe_open is not a mapping)
                    assert np.array_equal(a.get_tensor(key), b.get_tensor(key)), key
        manifest = json.loads((tmp_path / "ckpt" / step / "manifest.json").read_text())
        assert manifest["step"] == int(step[5:])
        for name, digest in manifest["files"].items():
            assert matches(tmp_path / "ckpt" / step / name, digest)
    events = [json.loads(line) for line in
              (tmp_path / "run" / "events.jsonl").read_text().splitlines()]
    saved = {e["step"]: e for e in events if e["event"] == "checkpoint"}
    assert sorted(saved) == [2, 4, 6, 8, 10]
    for step in steps:  # the event's bytes are the shards' sizes; every phase took time
        record = saved[int(step[5:])]
        shards = (tmp_path / "ckpt" / step).glob("stage_*.safetensors")
        assert record["bytes"] == sum(p.stat().st_size for p in shards)
        assert record["copy_s"] > 0 and record["write_s"] > 0 and record["sync_s"] > 0


@pytest.mark.parametrize("slow_write_s", [4.0, 0.0], ids=["slow-storage", "fast-storage"])
def test_background_writes_overlap_up_to_max_lag_steps(sync_run: Path, lib: Path,
                                                       tmp_path: Path,
                                                       slow_write_s: float) -> None:
    """checkpoint.max_lag_steps 3, a checkpoint after steps 5 and 10: a write slower than three
    steps completes after step 8 (the loop waits for it then), a fast one as soon as every
    rank's write is done (after step 6, 7 or 8); the training is the same either way."""
    job = write_job(tmp_path, "lag", pp=2, dp=1, schedule="1f1b", m=2, model=MODEL,
                    checkpoint={"dir": str(tmp_path / "ckpt"), "interval": 5, "keep": 3,
                                "async_write": True, "max_lag_steps": 3})
    env = {"GANTRY_FAULT_SLOW_CHECKPOINT_S": str(slow_write_s)}
    result = gantry_train(job, 2, lib, run_dir=tmp_path / "run", env=env)
    assert result.returncode == 0, result.stderr[-3000:]
    assert _trajectory(tmp_path / "run") == _trajectory(sync_run / "run")
    lines = (tmp_path / "run" / "events.jsonl").read_text().splitlines()
    done = {e["step"]: e["completed_after_step"] for e in map(json.loads, lines)
            if e["event"] == "checkpoint"}
    assert sorted(done) == [5, 10] and done[10] == 10
    assert done[5] == 8 if slow_write_s else 6 <= done[5] <= 8
    # the loop's checkpoint time lands in the record of the step after it (and the end
    # event), within the wall time between the records; the slow write's wait is seen
    records = {r["step"]: r for r in map(json.loads, (tmp_path / "run" / "metrics.jsonl")
                                         .read_text().splitlines())}
    [end] = [e for e in map(json.loads, lines) if e["event"] == "end"]
    for step in range(2, 11):
        gap = records[step]["time"] - records[step - 1]["time"]
        assert 0 <= records[step]["checkpoint_s"] <= gap, (step, records[step])
    assert 0 < end["checkpoint_s"] <= end["time"] - records[10]["time"] + 1e-3, end
    if slow_write_s:
        assert records[9]["checkpoint_s"] > 0  # waited for checkpoint 5 after step 8
    for step in (5, 10):
        directory = tmp_path / "ckpt" / f"step_{step:08d}"
        manifest = json.loads((directory / "manifest.json").read_text())
        for name, digest in manifest["files"].items():
            assert matches(directory / name, digest)


def test_sigusr1_stops_at_one_step_and_resumes_bit_exact(sync_run: Path, lib: Path,
                                                         tmp_path: Path) -> None:
    job = _job(tmp_path)
    env = {**os.environ, **MPI_ENV, "PYTHONPATH": str(REPO), "GANTRY_FAULT_STEP_DELAY_S": "0.5",
           "GANTRY_ATTEMPT_DIR": str(tmp_path)}
    cmd = ["mpirun", "--oversubscribe", "-np", "2", sys.executable, "-m", "launcher", "train",
           str(job), "--lib", str(lib), "--run-dir", str(tmp_path / "run")]
    proc = subprocess.Popen(cmd, env=env, cwd=REPO, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline:
            path = tmp_path / "run" / "metrics.jsonl"
            if path.is_file() and len(path.read_text().splitlines()) >= 3:
                break
            time.sleep(0.2)
        proc.send_signal(signal.SIGUSR1)  # mpirun forwards it to every rank
        _out, err = proc.communicate(timeout=180)
    finally:
        proc.kill()
    assert proc.returncode == TRAINER_STOPPED, err[-3000:]
    lines = (tmp_path / "run" / "events.jsonl").read_text().splitlines()
    events = [json.loads(line) for line in lines]
    stop = next(e for e in events if e["event"] == "stop")
    assert stop["signal"] == "USR1" and stop["checkpointed"]
    assert (tmp_path / "trainer-stop").read_text() == f"USR1 {stop['step']}\n"
    assert (tmp_path / "ckpt" / f"step_{stop['step']:08d}" / "manifest.json").is_file()
    assert [r["step"] for r in read_metrics(tmp_path / "run")][-1] == stop["step"]
    resumed = gantry_train(job, 2, lib, "--resume", run_dir=tmp_path / "run")
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert _trajectory(tmp_path / "run") == _trajectory(sync_run / "run")


def test_an_eviction_stops_at_one_step_and_resumes_bit_exact(sync_run: Path, lib: Path,
                                                              tmp_path: Path) -> None:
    job = _job(tmp_path)
    attempt = tmp_path / "attempt"
    env = {**os.environ, **MPI_ENV, "PYTHONPATH": str(REPO), "GANTRY_FAULT_STEP_DELAY_S": "0.5",
           "GANTRY_ATTEMPT_DIR": str(attempt)}
    cmd = ["mpirun", "--oversubscribe", "-np", "2", sys.executable, "-m", "launcher", "train",
           str(job), "--lib", str(lib), "--run-dir", str(tmp_path / "run")]
    proc = subprocess.Popen(cmd, env=env, cwd=REPO, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline:
            path = tmp_path / "run" / "metrics.jsonl"
            if path.is_file() and len(path.read_text().splitlines()) >= 3:
                break
            time.sleep(0.2)
        assert request_eviction(attempt, "n2", "health", "Xid 79", {"check": "gpu.xid 79"})
        _out, err = proc.communicate(timeout=180)
    finally:
        proc.kill()
    assert proc.returncode == TRAINER_EVICTED, err[-3000:]
    events = [json.loads(line) for line in
              (tmp_path / "run" / "events.jsonl").read_text().splitlines()]
    evict = next(e for e in events if e["event"] == "evict")
    assert evict["checkpointed"] and evict["nodes"] == {"n2": "health-gpu.xid-79"}
    assert f"eviction of n2 (health: Xid 79): stopped after step {evict['step']}" in err
    assert not (attempt / "trainer-stop").exists()  # not a signal: the script must not requeue
    assert evict["step"] < 10
    assert (tmp_path / "ckpt" / f"step_{evict['step']:08d}" / "manifest.json").is_file()
    assert [r["step"] for r in read_metrics(tmp_path / "run")][-1] == evict["step"]
    resumed = gantry_train(job, 2, lib, "--resume", run_dir=tmp_path / "run")
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert _trajectory(tmp_path / "run") == _trajectory(sync_run / "run")


def test_watchdog_aborts_a_hung_pipeline(lib: Path, tmp_path: Path) -> None:
    job = _job(tmp_path, policy={"hang_timeout_s": 3})
    env = {"GANTRY_FAULT_HANG": "3", "GANTRY_FAULT_STATE_DIR": str(tmp_path)}
    os.environ.update(env)
    try:
        result = gantry_train(job, 2, lib, run_dir=tmp_path / "run")
    finally:
        for key in env:
            os.environ.pop(key)
    assert result.returncode == TRAINER_HUNG, result.stderr[-3000:]
    assert "rank 1 stops itself before step 3" in result.stderr
    assert "error: watchdog: rank 0 made no progress" in result.stderr
    assert [r["step"] for r in read_metrics(tmp_path / "run")] == [1, 2]


@pytest.mark.parametrize(("variable", "value"), [
    ("GANTRY_FAULT_HANG", "soon"), ("GANTRY_FAULT_CRASH_IN_CHECKPOINT", "0"),
    ("GANTRY_FAULT_STEP_DELAY_S", "-1"), ("GANTRY_FAULT_SLOW_CHECKPOINT_S", "slow"),
])
def test_bad_hook_values_are_one_line_errors(lib: Path, tmp_path: Path, variable: str,
                                             value: str) -> None:
    os.environ[variable] = value
    try:
        result = gantry_train(_job(tmp_path), 2, lib, run_dir=tmp_path / "run")
    finally:
        os.environ.pop(variable)
    assert result.returncode == 2, result.stderr[-3000:]
    errors = [line for line in result.stderr.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1 and "Traceback" not in result.stderr, result.stderr[-3000:]
    assert errors[0].startswith(f"error: {variable}: {value!r} is not allowed")
