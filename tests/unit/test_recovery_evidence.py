"""Pinning a failed step on its node: the rank records, the watchdog's finding, the evidence
order, the spares' order, the job's fault record, and step-watch with real child processes."""

from __future__ import annotations

import json
import sys
import threading
import time
from dataclasses import replace
from pathlib import Path

import pytest

from launcher.errors import UserInputError
from launcher.job_dir import HANG_FILE, NODE_FAULTS_FILE, STEP_ERR_FILE
from launcher.job_exit_codes import TRAINER_HUNG, TRAINER_STOPPED
from launcher.preflight.drain_policy import NodeState
from launcher.recovery.evidence import find_culprits, lost_nodes, silent_nodes
from launcher.recovery.node_faults import (
    add_faults,
    append_recovery,
    read_faults,
    read_recoveries,
)
from launcher.recovery.recover import fence_nodes, fence_updates
from launcher.recovery.spares import candidates, nearest_first, usable
from launcher.recovery.step_watch import first_failure, killed_status, watch_step
from launcher.train.rank_records import RankRecords, read_ranks, stalled_ranks
from launcher.train.watchdog import Watchdog


def node(name: str, state: str = "IDLE", reason: str = "") -> NodeState:
    return NodeState(name, state, reason)


def ranks_on(attempt: Path, nodes: list[str]) -> list[RankRecords]:
    records = [RankRecords(attempt, rank, name) for rank, name in enumerate(nodes)]
    for record in records:
        record.started()
    return records


def test_records_round_trip_and_the_first_exit_wins(tmp_path: Path) -> None:
    first, second = ranks_on(tmp_path, ["n1", "n2"])
    first.progress("step 1")
    first.alive(force=True)
    second.ended(77, "crash")
    second.ended(0, "later path out")
    states = read_ranks(tmp_path)
    assert states[0].node == "n1" and states[0].beats == 1 and states[0].phase == "step 1"
    assert states[0].exit_code is None
    assert (states[1].exit_code, states[1].why) == (77, "crash")


def test_damaged_records_count_as_absent(tmp_path: Path) -> None:
    ranks_on(tmp_path, ["n1"])
    directory = tmp_path / "ranks"
    (directory / "0.exit").write_text("{not json")
    (directory / "1.start").write_text(json.dumps({"node": 5, "time": "now"}))
    (directory / "junk.start").write_text("{}")
    (directory / "2.beat").write_bytes(b"{" + b" " * 70000 + b"}")
    states = read_ranks(tmp_path)
    assert sorted(states) == [0, 1, 2]
    assert states[0].exit_code is None and states[1].node is None
    assert states[1].started is None and states[2].beat_time is None


def test_stalled_ranks_silent_first_then_behind(tmp_path: Path) -> None:
    records = ranks_on(tmp_path, ["n1", "n2", "n3"])
    now = time.time()
    assert stalled_ranks(read_ranks(tmp_path), now) == []  # all alike
    for record in records[:2]:
        record.progress("step 2")
        record.alive(force=True)
    assert stalled_ranks(read_ranks(tmp_path), now) == [2]  # behind its peers
    assert stalled_ranks(read_ranks(tmp_path), now + 60) == [2]  # all silent: progress decides
    records[2].progress("step 2")
    records[2].progress("step 3")
    states = read_ranks(tmp_path)
    states[2] = replace(states[2], beat_time=now - 60)
    assert stalled_ranks(states, now) == [2]  # silent (killed or stopped), though not behind


def test_watchdog_names_the_stalled_peer_not_itself(tmp_path: Path) -> None:
    mine, _peer = ranks_on(tmp_path, ["n1", "n2"])
    mine.progress("step 3")
    mine.alive(force=True)
    fired: list[str] = []
    done = threading.Event()

    def on_hang(message: str) -> None:
        fired.append(message)
        done.set()

    dog = Watchdog(0.3, rank=0, on_hang=on_hang, records=mine, startup_timeout_s=0.3)
    dog.start()
    assert done.wait(10)
    dog.stop()
    assert "rank 0 made no progress" in fired[0] and "stalled: rank 1 on n2" in fired[0]
    assert "policy.startup_timeout_s" in fired[0]  # no beat from the step loop yet
    finding = json.loads((tmp_path / HANG_FILE).read_text())
    assert finding["noticed_by"] == 0 and finding["stalled_ranks"] == [1]
    assert finding["stalled_nodes"] == ["n2"]


def test_lost_node_is_the_strongest_evidence(tmp_path: Path) -> None:
    first, _second = ranks_on(tmp_path, ["n1", "n2"])
    first.ended(77)
    states = {"n1": node("n1", "ALLOCATED"), "n2": node("n2", "DOWN+DRAIN")}
    found = find_culprits(tmp_path, ["n1", "n2"], ["n1", "n2", "n3"], states, time.time())
    assert found.culprits == {"n2": "node-lost"}
    assert lost_nodes(["n1", "n2"], ["n2"], {}) == ["n1"]  # gone from the job
    silent = {"n1": node("n1", "ALLOCATED*")}
    assert lost_nodes(["n1"], None, silent) == [] and silent_nodes(["n1"], silent) == ["n1"]


def test_a_node_missing_a_ping_counts_only_without_better_evidence(tmp_path: Path) -> None:
    _first, second = ranks_on(tmp_path, ["n1", "n2"])
    second.ended(77)
    busy = {"n1": node("n1", "IDLE+NOT_RESPONDING")}
    found = find_culprits(tmp_path, ["n1", "n2"], None, busy, time.time())
    assert found.culprits == {"n2": "rank1-exit77"}
    (tmp_path / "ranks" / "1.exit").unlink()
    for rank, name in enumerate(["n1", "n2"]):  # both stopped alike, records rewritten
        RankRecords(tmp_path, rank, name).ended(TRAINER_STOPPED)
    found = find_culprits(tmp_path, ["n1", "n2"], None, busy, time.time())
    assert found.culprits == {"n1": "node-not-responding"}


def test_a_killed_rank_is_blamed_not_the_peer_that_lost_its_connection(
        tmp_path: Path) -> None:
    survivor, _killed = ranks_on(tmp_path, ["n1", "n2"])
    beat = json.loads((tmp_path / "ranks" / "1.beat").read_text())
    beat["time"] -= 10  # went quiet when it was killed
    (tmp_path / "ranks" / "1.beat").write_text(json.dumps(beat))
    survivor.ended(1, "NativeError: MPI_Recv failed: connection reset")
    assert find_culprits(tmp_path, ["n1", "n2"], None, {}, time.time()).culprits == {
        "n2": "rank1-vanished"}
    (tmp_path / STEP_ERR_FILE).write_text("srun: error: n1: task 0: Exited with exit code 1\n"
                                          "srun: error: n2: task 1: Killed\n")
    assert find_culprits(tmp_path, ["n1", "n2"], None, {}, time.time()).culprits == {
        "n2": "rank1-killed"}


def test_watchdog_finding_beats_the_exit_codes_of_who_noticed(tmp_path: Path) -> None:
    first, _second = ranks_on(tmp_path, ["n1", "n2"])
    first.ended(TRAINER_HUNG, "watchdog")
    (tmp_path / HANG_FILE).write_text(json.dumps(
        {"noticed_by": 0, "stalled_ranks": [1], "silent": [1]}))
    found = find_culprits(tmp_path, ["n1", "n2"], ["n1", "n2"], {}, time.time())
    assert found.culprits == {"n2": "rank1-unresponsive"}


def test_earliest_own_failure_is_blamed(tmp_path: Path) -> None:
    records = ranks_on(tmp_path, ["n1", "n2", "n3"])
    records[2].ended(77, "crash writing a shard")
    records[0].ended(TRAINER_STOPPED)
    records[1].ended(1, "later")
    found = find_culprits(tmp_path, ["n1", "n2", "n3"], None, {}, time.time())
    assert found.culprits == {"n3": "rank2-exit77"}


def test_srun_task_report_names_a_killed_rank(tmp_path: Path) -> None:
    records = ranks_on(tmp_path, ["n1", "n2"])
    records[0].ended(TRAINER_HUNG)
    (tmp_path / STEP_ERR_FILE).write_text(
        f"srun: error: n1: task 0: Exited with exit code {TRAINER_HUNG}\n"
        "srun: error: n2: task 1: Killed\n")
    found = find_culprits(tmp_path, ["n1", "n2"], None, {}, time.time())
    assert found.culprits == {"n2": "rank1-killed"}


def test_no_evidence_blames_no_node(tmp_path: Path) -> None:
    records = ranks_on(tmp_path, ["n1", "n2"])
    for record in records:
        record.ended(TRAINER_STOPPED)
    assert find_culprits(tmp_path, ["n1", "n2"], None, {}, time.time()).culprits == {}


def test_spares_usable_unused_and_planned_order() -> None:
    states = {n: node(n) for n in ["n1", "n2", "n3", "n4", "n5"]}
    states["n4"] = node("n4", "IDLE+DRAIN", "PSU swap")
    pool = candidates(["n1", "n2", "n3", "n4", "n5"], ["n1", "n2"], ["n3"], states)
    assert pool == ["n5"]
    assert not usable(None) and not usable(node("x", "MIXED+DRAIN")) and usable(node("x"))
    assert nearest_first(["n5", "n6", "n7"], ["n2"], None, ["n7", "n5"]) == ["n7", "n5", "n6"]


def test_fault_record_counts_and_survives_damage(tmp_path: Path) -> None:
    add_faults(tmp_path, {"n2": "rank1-killed"}, 10.0)
    faults = add_faults(tmp_path, {"n2": "node-lost", "n3": "rank2-hung"}, 20.0)
    assert (faults["n2"].count, faults["n2"].last, faults["n3"].count) == (2, "node-lost", 1)
    (tmp_path / NODE_FAULTS_FILE).write_text(json.dumps(
        {"n2": {"count": True, "last": "x", "time": 1}, "n4": {"count": 1, "last": "y",
                                                             "time": 2}}))
    assert list(read_faults(tmp_path)) == ["n4"]
    (tmp_path / NODE_FAULTS_FILE).write_text("[")
    assert read_faults(tmp_path) == {}
    append_recovery(tmp_path, {"decision": "relaunch"})
    with open(tmp_path / "recoveries.jsonl", "a") as handle:
        handle.write('{"torn')
    append_recovery(tmp_path, {"decision": "requeue"})
    assert [r["decision"] for r in read_recoveries(tmp_path)] == ["relaunch"]  # torn + next


def test_fence_is_the_planned_exclude(tmp_path: Path) -> None:
    (tmp_path / "placement.json").write_text(json.dumps(
        {"sbatch_options": ["--switches=2@10:00", "--exclude=n[5-8]"]}))
    assert fence_nodes(tmp_path) == {"n5", "n6", "n7", "n8"}
    assert fence_updates(tmp_path) == ["Switches=0"]  # Slurm would hold the job for them
    (tmp_path / "placement.json").write_text("{")
    assert fence_nodes(tmp_path) == set() and fence_updates(tmp_path) == []


CHILD = """
import json, signal, sys, time
from pathlib import Path
attempt = Path(sys.argv[1])
(attempt / "ranks").mkdir(parents=True, exist_ok=True)
(attempt / "ranks" / "1.exit").write_text(json.dumps({"rank": 1, "node": "n2", "code": 77,
                                                      "time": time.time()}))
print("srun: error: n2: task 1: Exited with exit code 77", file=sys.stderr, flush=True)
signal.pause()
"""


def test_step_watch_stops_a_launcher_that_waits_for_a_dead_node(tmp_path: Path) -> None:
    rc = watch_step([sys.executable, "-c", CHILD, str(tmp_path)], tmp_path, grace_s=0.5)
    assert rc == 77
    assert "task 1: Exited with exit code 77" in (tmp_path / STEP_ERR_FILE).read_text()
    assert first_failure(tmp_path) == 77


@pytest.mark.parametrize("code", [0, 3])
def test_step_watch_returns_the_launchers_own_status(tmp_path: Path, code: int) -> None:
    argv = [sys.executable, "-c", f"import sys; sys.exit({code})"]
    assert watch_step(argv, tmp_path, grace_s=0.5) == code


def test_step_watch_reports_a_launcher_killed_by_a_signal(tmp_path: Path) -> None:
    argv = [sys.executable, "-c", "import os, signal; os.kill(os.getpid(), signal.SIGKILL)"]
    assert watch_step(argv, tmp_path, grace_s=0.5) == 128 + 9


def test_step_watch_drains_a_launcher_whose_log_cannot_be_kept(tmp_path: Path) -> None:
    (tmp_path / STEP_ERR_FILE).mkdir()  # a copy that cannot be written: a full disk alike
    noisy = "import sys; sys.stderr.write('x' * 300_000); sys.exit(3)"
    assert watch_step([sys.executable, "-c", noisy], tmp_path, grace_s=0.5) == 3


def test_a_killed_launchers_status_stays_recoverable_unless_bad_input() -> None:
    assert killed_status(1) == 137  # a peer's broken connection: the lost rank's kind
    assert killed_status(None) == 137
    assert [killed_status(c) for c in (2, 76, 77, 139)] == [2, 76, 77, 139]


def test_step_watch_refuses_a_program_it_cannot_run(tmp_path: Path) -> None:
    with pytest.raises(UserInputError, match="cannot run '/nonexistent/srun'"):
        watch_step(["/nonexistent/srun"], tmp_path, grace_s=0.5)
    with pytest.raises(UserInputError, match="--attempt-dir"):
        watch_step([sys.executable, "-c", "pass"], Path("/dev/null/x"), grace_s=0.5)


@pytest.mark.parametrize(("args", "message"), [
    (["--launch-nodes", ",,"], "--launch-nodes: no node named"),
    (["--launch-nodes", "n1", "--job-id", "1;rm -rf /"], "--job-id: '1;rm -rf /' is not"),
    (["--launch-nodes", "n1", "--step-rc", "-4"], "--step-rc: -4 is not an exit status"),
    (["--launch-nodes", "n1", "--attempt-dir", "/nonexistent/a"], "not a directory"),
    (["--launch-nodes", "n1", "--nodes-out", "/dev/null/x"], "cannot be written"),
])
def test_recover_refuses_bad_input_in_one_line(tmp_path: Path, args: list[str],
                                               message: str) -> None:
    import subprocess

    base = ["--job-dir", str(tmp_path), "--attempt-dir", str(tmp_path),
            "--nodes-out", str(tmp_path / "next")]
    for flag, value in zip(args[::2], args[1::2], strict=True):
        if flag in base:
            base[base.index(flag) + 1] = value
        else:
            base += [flag, value]
    done = subprocess.run([sys.executable, "-m", "launcher", "recover", *base],
                          capture_output=True, text=True, check=False)
    assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stderr
    assert done.stderr.startswith("error: ") and message in done.stderr, done.stderr
    assert not (tmp_path / "next").exists() and not (tmp_path / "recoveries.jsonl").exists()


def test_a_failure_that_follows_its_rank_to_the_spare_is_the_programs() -> None:
    from launcher.recovery.evidence import Finding
    from launcher.recovery.recover import program_fault

    first = [{"culprits": {"n2": "rank1-exit77"}}]
    assert program_fault(first, Finding({"n5": "rank1-exit77"})) == "rank1"
    assert program_fault(first, Finding({"n5": "rank1-exit1"})) is None  # another failure
    assert program_fault(first, Finding({"n2": "rank1-exit77"})) is None  # the same node
    assert program_fault([], Finding({"n5": "rank1-exit77"})) is None
    hung = [{"culprits": {"n2": "rank1-unresponsive"}}]
    assert program_fault(hung, Finding({"n5": "rank1-unresponsive"})) is None  # node-like
    assert program_fault(first, Finding({"n5": "rank1-exit77", "n6": "rank2-exit77"})) is None
