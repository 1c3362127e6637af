"""Eviction requests: one file per node, first writer wins across processes, read back by the
trainer's rank 0 and taken by `gantry recover` as the strongest evidence."""

from __future__ import annotations

import json
import multiprocessing
from pathlib import Path

import pytest

from launcher.errors import UserInputError
from launcher.job_dir import EVICTIONS_DIR
from launcher.job_exit_codes import TRAINER_EVICTED
from launcher.preflight.drain_policy import NodeState
from launcher.preflight.drain_reason import DRAIN_PREFIX, is_gantry_reason
from launcher.recovery.evictions import drain_word, pending_evictions, request_eviction
from launcher.recovery.evidence import find_culprits
from launcher.recovery.step_watch import killed_status
from launcher.train.rank_records import RankRecords


def test_a_request_round_trips_and_names_the_drain_word(tmp_path: Path) -> None:
    assert pending_evictions(tmp_path) == []  # no directory: nothing pending
    assert request_eviction(tmp_path, "n2", "health", "Xid 79 on 0000:00:06\n(fell off)",
                            {"check": "gpu.xid 79", "observed": "Xid 79"}, now=5.0)
    [found] = pending_evictions(tmp_path)
    assert (found.node, found.source, found.time) == ("n2", "health", 5.0)
    assert found.reason == "Xid 79 on 0000:00:06 (fell off)"  # one line
    assert found.what == "health-gpu.xid-79"
    assert is_gantry_reason(f"{DRAIN_PREFIX}run:{found.what}")
    assert found.detail["observed"] == "Xid 79"


def test_the_first_request_for_a_node_wins(tmp_path: Path) -> None:
    assert request_eviction(tmp_path, "n1", "straggler", "rank 3 slow", now=1.0)
    assert not request_eviction(tmp_path, "n1", "health", "later", now=2.0)
    assert request_eviction(tmp_path, "n3", "health", "ib link down", now=0.5)
    assert [(e.node, e.source) for e in pending_evictions(tmp_path)] == [
        ("n3", "health"), ("n1", "straggler")]  # oldest first


def _ask(args: tuple[str, int]) -> bool:
    directory, index = args
    return request_eviction(Path(directory), "n7", "health", f"writer {index}")


def test_concurrent_writers_leave_one_whole_record(tmp_path: Path) -> None:
    with multiprocessing.get_context("spawn").Pool(4) as pool:
        made = pool.map(_ask, [(str(tmp_path), i) for i in range(16)])
    assert made.count(True) == 1
    names = sorted(p.name for p in (tmp_path / EVICTIONS_DIR).iterdir())
    assert names == ["n7.json"]  # no temp file left behind
    [found] = pending_evictions(tmp_path)
    assert found.reason == f"writer {made.index(True)}"


def test_damaged_and_foreign_files_are_skipped(tmp_path: Path) -> None:
    directory = tmp_path / EVICTIONS_DIR
    directory.mkdir()
    (directory / "n1.json").write_text("{torn")
    (directory / "n2.json").write_text(json.dumps({"node": "n9", "source": "health",
                                                   "reason": "x", "what": "w", "time": 1}))
    (directory / "n3.json").write_text(json.dumps({"node": "n3", "source": "operator",
                                                   "reason": "x", "what": "w", "time": 1}))
    (directory / ".n4.json.ab12.tmp").write_text("{}")
    assert pending_evictions(tmp_path) == []


@pytest.mark.parametrize(("node", "source", "needle"), [
    ("n1;rm -rf", "health", "node 'n1;rm -rf' is not allowed"),
    ("", "health", "node '' is not allowed"),
    ("n1", "user", "source 'user' is not allowed (expected one of health, straggler)"),
])
def test_bad_requests_are_one_line_errors(tmp_path: Path, node: str, source: str,
                                          needle: str) -> None:
    with pytest.raises(UserInputError, match=r"^eviction: ") as err:
        request_eviction(tmp_path, node, source, "reason")
    assert needle in str(err.value) and "\n" not in str(err.value)
    assert not (tmp_path / EVICTIONS_DIR).exists() or not any(
        (tmp_path / EVICTIONS_DIR).iterdir())


def test_drain_words_are_gantry_reasons() -> None:
    for source, text in (("health", "gpu.row_remap"), ("straggler", "rank 3: fwd 1.4x median"),
                         ("health", "!!!"), ("health", "x" * 200)):
        word = drain_word(source, text)
        assert len(word) <= 48 and is_gantry_reason(f"{DRAIN_PREFIX}run:{word}"), word


def test_an_eviction_is_the_strongest_evidence(tmp_path: Path) -> None:
    records = [RankRecords(tmp_path, rank, name) for rank, name in enumerate(["n1", "n2"])]
    for record in records:
        record.started()
        record.ended(TRAINER_EVICTED, "evicted")
    request_eviction(tmp_path, "n2", "health", "row remap", {"check": "gpu.row_remap"},
                     now=42.0)
    request_eviction(tmp_path, "n9", "health", "not a launch node")
    # n1 is even down in Slurm: the eviction still names n2 (the ranks stopped for it).
    found = find_culprits(tmp_path, ["n1", "n2"], ["n1", "n2", "n3"],
                          {"n1": NodeState("n1", "DOWN", ""), "n2": NodeState("n2", "MIXED", "")},
                          100.0)
    assert found.culprits == {"n2": "health-gpu.row_remap"}
    assert found.evidence == "eviction requested: n2 by the health check (row remap)"
    assert found.fault_time == 42.0


def test_an_evicted_exit_is_not_a_rank_failure(tmp_path: Path) -> None:
    records = [RankRecords(tmp_path, rank, name) for rank, name in enumerate(["n1", "n2"])]
    for record in records:
        record.started()
        record.ended(TRAINER_EVICTED, "evicted")
    found = find_culprits(tmp_path, ["n1", "n2"], ["n1", "n2"], {}, 100.0)
    assert found.culprits == {}
    assert killed_status(TRAINER_EVICTED) == TRAINER_EVICTED
