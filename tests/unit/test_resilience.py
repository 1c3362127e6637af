"""Unit tests of the resilience parts: fault hooks (parsing, fire-once), the hang watchdog,
stop-signal handling, metrics set aside on resume, crash-safe shard writes and cleanup of
half-written checkpoints, restart/exit-code contract of the batch script."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest
from safetensors.numpy import load_file

from launcher import job_dir, job_exit_codes
from launcher.errors import UserInputError
from launcher.job_spec import CheckpointSpec, PolicySpec
from launcher.train import checkpoint, faults, metrics
from launcher.train.stop_signals import Agreed, StopRequest, signal_name
from launcher.train.watchdog import Watchdog
from launcher.typed_config import FieldError

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(("value", "expected"), [
    ("4", faults.StepFault(4, None)), ("12:3", faults.StepFault(12, 3)),
    ("1:0", faults.StepFault(1, 0)),
])
def test_step_fault_values(value: str, expected: faults.StepFault) -> None:
    assert faults.parse_step_fault("X", value) == expected


@pytest.mark.parametrize("value", ["0", "-1", "a", "3:", ":3", "1:2:3", "2.5", " 4"])
def test_step_fault_rejects(value: str) -> None:
    with pytest.raises(UserInputError, match=r"^GANTRY_FAULT_HANG: .* is not allowed"):
        faults.parse_step_fault("GANTRY_FAULT_HANG", value)


def test_step_delay_rejects_garbage(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(faults.STEP_DELAY, "soon")
    with pytest.raises(UserInputError, match="GANTRY_FAULT_STEP_DELAY_S: 'soon'"):
        faults.check_environment()
    monkeypatch.setenv(faults.STEP_DELAY, "0.25")
    assert faults.step_delay() == 0.25


def test_slow_node_hook(monkeypatch: pytest.MonkeyPatch) -> None:
    assert faults.slow_node_delay("n3") == 0.0
    monkeypatch.setenv(faults.SLOW_NODE, "n3:0.25")
    assert faults.slow_node_delay("n3") == 0.25
    assert faults.slow_node_delay("n4") == 0.0
    assert faults.parse_slow_node("a:b:1") == ("a:b", 1.0)  # the delay follows the last colon
    for value in ("n3", ":1", "n3:-1", "n3:soon", "n3:4000"):
        monkeypatch.setenv(faults.SLOW_NODE, value)
        with pytest.raises(UserInputError, match=r"^GANTRY_FAULT_SLOW_NODE: .* is not allowed "
                                                 r"\(expected NODE:SECONDS"):
            faults.check_environment()


def test_hooks_fire_once_per_state_dir(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv(faults.STATE_DIR, str(tmp_path))
    monkeypatch.setenv(faults.CRASH_IN_CHECKPOINT, "6:1")
    assert not faults.crash_point(4, 1)  # other step
    assert not faults.crash_point(6, 0)  # other rank
    assert faults.crash_point(6, 1)
    assert not faults.crash_point(6, 1)  # already fired
    fired = float((tmp_path / "fault-crash-in-checkpoint.fired").read_text().split()[0])
    assert abs(fired - time.time()) < 60


def test_hang_hook_stops_the_process(tmp_path: Path) -> None:
    code = ("from launcher.train import faults; faults.maybe_hang(3, 0, 2); "
            "faults.maybe_hang(3, 1, 2); print('not reached')")
    env = {**os.environ, "GANTRY_FAULT_HANG": "3", "GANTRY_FAULT_STATE_DIR": str(tmp_path),
           "PYTHONPATH": str(REPO)}
    proc = subprocess.Popen([sys.executable, "-c", code], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 30
        state = ""
        while time.monotonic() < deadline and state != "T":
            stat = Path(f"/proc/{proc.pid}/stat").read_text()
            state = stat[stat.rindex(")") + 2]
            time.sleep(0.05)
        assert state == "T"  # stopped (SIGSTOP) by rank 1's hook, as the last rank
        assert (tmp_path / "fault-hang.fired").is_file()
    finally:
        proc.kill()
        proc.communicate()


def test_watchdog_fires_on_silence_only() -> None:
    hangs: list[str] = []
    fired = threading.Event()

    def on_hang(message: str) -> None:
        hangs.append(message)
        fired.set()

    dog = Watchdog(0.4, rank=3, on_hang=on_hang)
    dog.start()
    try:
        for i in range(8):  # beating keeps it quiet
            dog.beat(f"step {i}")
            time.sleep(0.1)
        assert not hangs
        dog.beat("step 42")
        assert fired.wait(10)
    finally:
        dog.stop()
    assert len(hangs) == 1
    assert "rank 3 made no progress for" in hangs[0] and "stalled in step 42" in hangs[0]
    assert f"exit {job_exit_codes.TRAINER_HUNG}" in hangs[0]


def test_watchdog_off_with_zero_timeout() -> None:
    dog = Watchdog(0, rank=0, on_hang=lambda m: pytest.fail(m))
    dog.start()
    assert dog._thread is None
    dog.stop()


def test_watchdog_default_exits_the_process() -> None:
    code = ("import time; from launcher.train.watchdog import Watchdog; "
            "Watchdog(0.3, rank=1).start(); time.sleep(30)")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            env={**os.environ, "PYTHONPATH": str(REPO)}, timeout=60,
                            check=False)
    assert result.returncode == job_exit_codes.TRAINER_HUNG
    assert result.stderr.startswith("error: watchdog: rank 1 made no progress")


def test_stop_request_records_the_strongest_signal() -> None:
    from mpi4py import MPI

    stop = StopRequest()
    stop.install()
    try:
        assert not stop.agreed(MPI.COMM_SELF)
        assert stop.agreed(MPI.COMM_SELF, evict=True) == Agreed(0, True)
        os.kill(os.getpid(), signal.SIGUSR1)
        assert stop.signum == signal.SIGUSR1
        os.kill(os.getpid(), signal.SIGTERM)
        os.kill(os.getpid(), signal.SIGUSR1)
        assert stop.agreed(MPI.COMM_SELF).signum == signal.SIGTERM  # TERM wins over USR1
        assert stop.agreed(MPI.COMM_SELF, evict=True) == Agreed(signal.SIGTERM, True)
    finally:
        stop.uninstall()
    assert signal.getsignal(signal.SIGUSR1) == signal.SIG_DFL
    assert signal_name(signal.SIGUSR1) == "USR1"


def test_metrics_after_the_resume_step_are_set_aside(tmp_path: Path) -> None:
    path = tmp_path / job_dir.METRICS_FILE
    for step in (1, 2, 3, 4, 5):
        metrics.append_jsonl(path, {"step": step, "loss": float(step)})
    assert metrics.set_aside_after(tmp_path, 2) == 3
    assert [json.loads(x)["step"] for x in path.read_text().splitlines()] == [1, 2]
    replayed = (tmp_path / job_dir.REPLAYED_METRICS_FILE).read_text().splitlines()
    assert [json.loads(x)["step"] for x in replayed] == [3, 4, 5]
    assert metrics.set_aside_after(tmp_path, 2) == 0
    assert metrics.set_aside_after(tmp_path / "missing", 0) == 0


def test_a_record_cut_off_by_a_crash_is_set_aside_not_appended_to(tmp_path: Path) -> None:
    path = tmp_path / job_dir.METRICS_FILE
    path.write_bytes(b'{"step": 1, "loss": 1.0}\n{"step": 2, "note": "\xff"}\n{"step": 3, "lo')
    assert metrics.set_aside_after(tmp_path, 2) == 1
    metrics.append_jsonl(path, {"step": 3, "loss": 3.0})
    steps = [json.loads(x)["step"] for x in path.read_text(encoding="utf-8").splitlines()]
    assert steps == [1, 2, 3]
    assert (tmp_path / job_dir.REPLAYED_METRICS_FILE).read_text() == '{"step": 3, "lo\n'


def test_pruning_keeps_this_runs_checkpoints_over_a_newer_one_it_did_not_write(
    tmp_path: Path,
) -> None:
    for step in (9, 3):  # step 9: a checkpoint the resume skipped (corrupt) or a stray copy
        name, digest = checkpoint.write_shard(tmp_path, step, 0, _tensors(), seed=1)
        checkpoint.write_manifest(tmp_path, step, {name: digest}, keep=1)
    assert sorted(checkpoint.complete_steps(tmp_path)) == [3, 9]  # 3 is not pruned for 9
    for step in (4, 5):
        name, digest = checkpoint.write_shard(tmp_path, step, 0, _tensors(), seed=1)
        checkpoint.write_manifest(tmp_path, step, {name: digest}, keep=1)
    assert sorted(checkpoint.complete_steps(tmp_path)) == [5, 9]


def _tensors() -> checkpoint.Snapshot:
    return {"a": np.arange(1000, dtype=np.float32).reshape(10, 100),
            "exp_avg.a": np.ones((10, 100), dtype=np.float32)}


def test_write_shard_is_atomic_and_checksummed(tmp_path: Path) -> None:
    name, digest = checkpoint.write_shard(tmp_path, 4, 1, _tensors(), seed=5)
    path = job_dir.checkpoint_step_dir(tmp_path, 4) / name
    assert name == "stage_001.safetensors" and checkpoint.matches(path, digest)
    assert digest.startswith("sha256-pieces-") and not checkpoint.matches(path, "0" * 64)
    assert np.array_equal(load_file(str(path))["a"], _tensors()["a"])
    assert not list(path.parent.glob("*.tmp"))


def test_crash_mid_write_leaves_no_shard(tmp_path: Path) -> None:
    code = ("import sys, numpy as np; from pathlib import Path; from launcher.train import "
            "checkpoint; checkpoint.write_shard(Path(sys.argv[1]), 4, 1, {'a': np.ones((64, "
            "64), dtype=np.float32)}, seed=5, rank=1)")
    env = {**os.environ, "PYTHONPATH": str(REPO), "GANTRY_FAULT_CRASH_IN_CHECKPOINT": "4:1",
           "GANTRY_FAULT_STATE_DIR": str(tmp_path)}
    result = subprocess.run([sys.executable, "-c", code, str(tmp_path)], capture_output=True,
                            text=True, env=env, timeout=60, check=False)
    assert result.returncode == job_exit_codes.TRAINER_FAULT_INJECTED, result.stderr
    directory = job_dir.checkpoint_step_dir(tmp_path, 4)
    assert not (directory / "stage_001.safetensors").exists()
    tmp = directory / "stage_001.safetensors.tmp"
    assert 0 < tmp.stat().st_size < 64 * 64 * 4  # half written
    assert checkpoint.complete_steps(tmp_path) == []


def test_manifest_write_prunes_and_removes_crashed_dirs(tmp_path: Path) -> None:
    for step in (2, 4, 6):
        name, digest = checkpoint.write_shard(tmp_path, step, 0, _tensors(), seed=5)
        if step != 4:  # step 4 "crashed" before its manifest
            checkpoint.write_manifest(tmp_path, step, {name: digest}, keep=2)
    checkpoint.write_shard(tmp_path, 8, 0, _tensors(), seed=5)  # in flight, newer
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "step_00000002", "step_00000006", "step_00000008"]
    assert sorted(checkpoint.complete_steps(tmp_path)) == [2, 6]
    assert checkpoint.verify(job_dir.checkpoint_step_dir(tmp_path, 6), 1) == 6


def test_policy_and_checkpoint_fields_are_validated() -> None:
    with pytest.raises(FieldError, match="hang_timeout_s"):
        PolicySpec(hang_timeout_s=-1).validate()
    with pytest.raises(FieldError, match="max_restarts"):
        PolicySpec(max_restarts=-2).validate()
    PolicySpec(hang_timeout_s=0).validate()
    with pytest.raises(FieldError, match=r"max_lag_steps.*0 is not allowed \(expected >= 1\)"):
        CheckpointSpec(max_lag_steps=0).validate()
    CheckpointSpec(max_lag_steps=4).validate()


def test_script_exit_codes_are_distinct_and_documented() -> None:
    script_codes = [code for code, _ in job_exit_codes.DOCUMENTED]
    trainer = [job_exit_codes.TRAINER_STOPPED, job_exit_codes.TRAINER_HUNG,
               job_exit_codes.TRAINER_FAULT_INJECTED, job_exit_codes.TRAINER_BAD_INPUT]
    assert len(set(script_codes)) == len(script_codes)
    assert not set(script_codes) & set(trainer)
    assert job_exit_codes.RECOVERING in script_codes
    assert job_exit_codes.RESTARTS_EXHAUSTED in script_codes


def test_verify_checks_the_given_stages_shards_and_every_manifest_entry(tmp_path: Path) -> None:
    """Each rank verifies its own stages' shards at resume: a corrupt stage-1 shard fails
    stage 1's check and the full one, not stage 0's; a manifest missing a stage fails all."""
    files = dict(checkpoint.write_shard(tmp_path, 4, stage, _tensors(), seed=5)
                 for stage in (0, 1))
    checkpoint.write_manifest(tmp_path, 4, files, keep=2)
    directory = job_dir.checkpoint_step_dir(tmp_path, 4)
    shard = directory / "stage_001.safetensors"
    data = bytearray(shard.read_bytes())
    data[-1] ^= 1
    shard.write_bytes(bytes(data))
    assert checkpoint.verify(directory, 2, [0]) == 4
    assert checkpoint.verify(directory, 2, []) == 4
    for stages in ([1], [0, 1], None):
        with pytest.raises(UserInputError, match=r"stage_001\.safetensors: checksum mismatch"):
            checkpoint.verify(directory, 2, stages)
    with pytest.raises(UserInputError, match=r"no entry for stage_002\.safetensors"):
        checkpoint.verify(directory, 3, [0])


@pytest.mark.parametrize("step,files,message", [
    ("Infinity", {}, "step: inf is not allowed"),  # the fuzzer's find: an OverflowError
    (4.0, {}, "step: 4.0 is not allowed"),
    (True, {}, "step: True is not allowed"),
    (6, {}, "step: 6 is not allowed \\(expected 4, as its directory says\\)"),
    (4, [["stage_000.safetensors", 1]], "files: expected an object"),
    (4, {"stage_000.safetensors": 7}, "files: expected an object"),
])
def test_manifest_fields_are_checked(tmp_path: Path, step: object, files: object,
                                     message: str) -> None:
    directory = job_dir.checkpoint_step_dir(tmp_path, 4)
    directory.mkdir(parents=True)
    text = json.dumps({"step": step, "files": files}).replace('"Infinity"', "Infinity")
    (directory / job_dir.CHECKPOINT_MANIFEST_FILE).write_text(text)
    with pytest.raises(UserInputError, match=message):
        checkpoint.verify(directory, 1)
