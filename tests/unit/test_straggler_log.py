"""Rank 0's straggler watch and its record (launcher/train/straggler_watch.py,
straggler_log.py): one record per rank per episode with the fields the displays read, the
file in the job directory when there is one, damaged lines skipped by the reader, the line
`gantry status`, the live view and the report show, and a swap asked for once per node."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from launcher.job_dir import ATTEMPT_DIR_ENV, JOB_DIR_ENV, STRAGGLERS_FILE
from launcher.job_spec import JobSpec, ModelSpec, ParallelismSpec, PolicySpec
from launcher.train import straggler_log, straggler_watch
from launcher.train.straggler_watch import StragglerWatch, watch_for


def spec(action: str = "warn") -> JobSpec:
    return JobSpec("s", model=ModelSpec(n_layer=2, n_head=2, n_embd=8, vocab_size=32,
                                        seq_len=4),
                   parallelism=ParallelismSpec(pp=2, dp=2, schedule="1f1b", micro_batches=2,
                                               micro_batch_size=1),
                   policy=PolicySpec(straggler_action=action,  # type: ignore[arg-type]
                                     straggler_window_steps=3))


NODES = ["n1", "n2", "n3", "n4"]
SLOW = [0.01, 0.01, 0.05, 0.01]
HEALTHY = [0.01] * 4


def watch(run_dir: Path, action: str = "warn") -> StragglerWatch:
    found = watch_for(spec(action), [0, 1, 0, 1], [(0, 1), (1, 2)], NODES, run_dir)
    assert found is not None
    return found


def feed(w: StragglerWatch, steps: list[list[float]]) -> None:
    for step, compute in enumerate(steps, 1):
        w.after_step(step, compute)


def test_off_watches_nothing(tmp_path: Path) -> None:
    assert watch_for(spec("off"), [0, 1, 0, 1], [(0, 1), (1, 2)], NODES, tmp_path) is None


def test_one_record_per_episode_in_the_job_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    attempt = tmp_path / "runs" / "7-0"
    attempt.mkdir(parents=True)
    monkeypatch.setenv(JOB_DIR_ENV, str(tmp_path))
    monkeypatch.setenv(ATTEMPT_DIR_ENV, str(attempt))
    w = watch(attempt)
    feed(w, [SLOW] * 12 + [HEALTHY] * 6)
    records = straggler_log.read_stragglers(tmp_path)
    assert not (attempt / STRAGGLERS_FILE).exists()
    assert [(r["event"], r["rank"], r["node"], r["step"]) for r in records] == [
        ("straggler", 2, "n3", 6), ("straggler_cleared", 2, "n3", 14)]
    first = records[0]
    assert first["attempt"] == "7-0" and first["window"] == 3 and first["basis"] == "peers"
    assert first["peers"] == 1 and first["threshold"] == 1.2 and first["action"] == "warn"
    assert first["compute_s"] == 0.05 and first["reference_s"] == 0.01
    assert first["ratio"] == pytest.approx(5.0) and first["swap"] is None
    assert first["model_ratio"] > 5.0  # the model prices stage 0 below the head stage
    assert abs(first["time"] - records[1]["time"]) < 60
    err = capsys.readouterr().err
    assert err.count("warning: straggler n3 (rank 2) slow at step 6") == 1


def test_outside_a_job_the_run_dir_holds_the_file(tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(JOB_DIR_ENV, raising=False)
    monkeypatch.delenv(ATTEMPT_DIR_ENV, raising=False)
    w = watch(tmp_path, "swap")
    feed(w, [SLOW] * 8)
    (record,) = straggler_log.read_stragglers(tmp_path)
    assert record["attempt"] == tmp_path.name
    assert record["swap"] == "not available (not in a gantry job)"


def test_a_swap_is_asked_once_per_node(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    asked: list[tuple[Path, str, str]] = []

    def request(attempt_dir: Path, node: str, reason: str, detail: object = None) -> str:
        asked.append((attempt_dir, node, reason))
        return "requested"

    monkeypatch.setattr(straggler_watch, "request_swap", request)
    monkeypatch.setenv(ATTEMPT_DIR_ENV, str(tmp_path))
    monkeypatch.delenv(JOB_DIR_ENV, raising=False)
    w = watch(tmp_path, "swap")
    # both ranks of n3 slow (two ranks on one node): one request
    w.nodes = ["n1", "n3", "n3", "n4"]
    feed(w, [[0.01, 0.05, 0.05, 0.01]] * 8)
    assert [(node, reason.split(" compute")[0]) for _, node, reason in asked] == [
        ("n3", "rank 1")]
    records = straggler_log.read_stragglers(tmp_path)
    assert [(r["rank"], r["swap"]) for r in records] == [(1, "requested"), (2, "requested")]
    assert "5.00x over 3 steps" in asked[0][2]


def test_the_reader_skips_damage(tmp_path: Path) -> None:
    good = {"event": "straggler", "step": 9, "rank": 2, "node": "n3", "compute_s": 0.112,
            "reference_s": 0.0101, "ratio": 11.09, "window": 5, "basis": "peers", "peers": 1,
            "threshold": 1.2, "action": "warn", "swap": None}
    lines = ["not json", json.dumps({"event": "straggler", "rank": "two"}), json.dumps([1]),
             json.dumps({**good, "ratio": float("nan")}).replace("NaN", "1e999"),
             json.dumps(good), ""]
    (tmp_path / STRAGGLERS_FILE).write_bytes("\n".join(lines).encode() + b"\xff\n")
    assert straggler_log.read_stragglers(tmp_path) == [good]
    assert straggler_log.read_stragglers(tmp_path / "missing") == []


def test_the_lines_shown() -> None:
    flagged = {"event": "straggler", "step": 9, "rank": 2, "node": "n3", "compute_s": 0.112,
               "reference_s": 0.0101, "ratio": 11.09, "window": 5, "basis": "peers",
               "peers": 1, "threshold": 1.2, "action": "warn", "swap": None}
    assert straggler_log.describe(flagged) == (
        "n3 (rank 2) slow at step 9: compute 112 ms vs 10.1 ms, the median of its 1 "
        "same-shape peer: 11.09x over 5 steps (threshold 1.20x); warn")
    model = {**flagged, "basis": "model", "peers": 3, "action": "swap", "swap": "requested",
             "compute_s": 2.5, "reference_s": 2.0, "ratio": 1.25}
    assert straggler_log.describe(model) == (
        "n3 (rank 2) slow at step 9: compute 2.5 s vs 2 s, the cost model's figure from 3 "
        "other ranks: 1.25x over 5 steps (threshold 1.20x); swap requested")
    cleared = {**flagged, "event": "straggler_cleared", "step": 30, "ratio": 1.02}
    assert straggler_log.describe(cleared) == (
        "n3 (rank 2) back to pace at step 30: 1.02x over 5 steps")


def test_stragglers_reach_the_live_view_once(tmp_path: Path) -> None:
    from launcher.job_dir import JobDir
    from launcher.live.summary import FollowState
    from launcher.live.watcher import JobDirWatcher, Straggler

    job = JobDir(tmp_path / "job")
    (job.path / "runs" / "7-0").mkdir(parents=True)
    watcher = JobDirWatcher(job, "7")
    assert not [e for e in watcher.poll() if isinstance(e, Straggler)]
    flagged = {"event": "straggler", "step": 9, "rank": 2, "node": "n3", "compute_s": 0.112,
               "reference_s": 0.0101, "ratio": 11.09, "window": 5, "basis": "peers",
               "peers": 1, "threshold": 1.2, "action": "warn", "swap": None}
    cleared = {**flagged, "event": "straggler_cleared", "step": 30, "ratio": 1.02}
    path = job.path / STRAGGLERS_FILE
    path.write_text(json.dumps(flagged) + "\n" + json.dumps(cleared)[:20])  # torn last line
    events = [e for e in watcher.poll() if isinstance(e, Straggler)]
    assert events == [Straggler(straggler_log.describe(flagged), True)]
    assert not [e for e in watcher.poll() if isinstance(e, Straggler)]
    path.write_text(json.dumps(flagged) + "\n" + json.dumps(cleared) + "\n")
    later = [e for e in watcher.poll() if isinstance(e, Straggler)]
    assert later == [Straggler(straggler_log.describe(cleared), False)]
    state = FollowState()
    for event in [*events, *later]:
        state.apply(event)
    assert state.stragglers == [events[0].line]  # the summary lists the ranks found slow


def test_swap_requests_the_nodes_eviction(tmp_path: Path,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    from launcher.recovery.evictions import pending_evictions

    monkeypatch.setenv(ATTEMPT_DIR_ENV, str(tmp_path))
    monkeypatch.delenv(JOB_DIR_ENV, raising=False)
    w = watch(tmp_path, "swap")
    feed(w, [SLOW] * 5)
    assert pending_evictions(tmp_path) == []  # not judged yet: warm-up + window
    w.after_step(6, SLOW)
    (eviction,) = pending_evictions(tmp_path)
    assert (eviction.node, eviction.source, eviction.what) == (
        "n3", "straggler", "straggler-slow-compute")
    assert eviction.reason == "rank 2 compute 50 ms vs 10 ms (5.00x over 3 steps)"
    assert eviction.detail["rank"] == 2 and eviction.detail["step"] == 6
    (record,) = straggler_log.read_stragglers(tmp_path)
    assert record["swap"] == "requested" and record["action"] == "swap"
