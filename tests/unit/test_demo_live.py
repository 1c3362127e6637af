"""The live view's pieces on a job directory written step by step: log markers and phase
times, the watcher (complete lines only, attempts, when the preflight outcome is reported,
bad metrics lines), preflight rows and outcomes, the placement tree with stage labels, the
summary lines and the ETA. Verdicts come from real `gantry preflight --json` runs with the
demo's fault drill (fake sysfs, one node's InfiniBand port down)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from rich.console import Console

from launcher.demo.faults import write_fake_sysfs
from launcher.job_dir import JobDir
from launcher.live.follow import StepClock, format_eta
from launcher.live.placement_view import placement_tree
from launcher.live.preflight_rows import PlannedRole, read_placement
from launcher.live.summary import FollowState, summarize, summary_lines
from launcher.live.watcher import (
    AttemptStarted,
    JobDirWatcher,
    LogLines,
    Note,
    PreflightDone,
    Recovered,
    StepDone,
)
from launcher.placement_record import PlacementRecord
from launcher.report.log_markers import attempt_marks, parse_line
from launcher.report.run_data import RankTiming, StepRecord
from launcher.site_config import DEFAULT_SITE, load_site
from launcher.site_topology import site_topology
from launcher.slurm import JobInfo, NodeInfo

REPO = Path(__file__).resolve().parents[2]
NODES = ("n1", "n2", "n3", "n4", "n5")


def metrics_line(step: int, loss: float) -> str:
    timing = {"compute_s": 0.2, "send_s": 0.0, "recv_s": 0.0, "bubble_s": 0.1, "sync_s": 0.0,
              "total_s": 0.3}
    return json.dumps({"step": step, "loss": loss, "lr": 1e-3, "grad_norm": 1.0,
                       "tokens_per_s": 1000.0 + step, "ranks": [timing]}) + "\n"


@pytest.fixture(scope="module")
def labelled_verdicts(tmp_path_factory: pytest.TempPathFactory) -> str:
    """`srun --label` style output of real preflight runs on n1..n5, n3's port down."""
    tmp = tmp_path_factory.mktemp("verdicts")
    sysfs = write_fake_sysfs(tmp / "sysfs", ["n3"])
    lines = []
    for task, node in enumerate(NODES):
        env = {**os.environ, "GANTRY_SYSFS_ROOT": str(sysfs), "SLURMD_NODENAME": node,
               "GANTRY_STATE_DIR": str(tmp / "state"), "PYTHONPATH": str(REPO)}
        done = subprocess.run([sys.executable, "-m", "launcher", "preflight", "--json",
                               "--site", str(DEFAULT_SITE)], capture_output=True, text=True,
                              env=env, cwd=REPO, check=False)
        assert done.returncode == (1 if node == "n3" else 0), done.stderr
        lines.append(f"{task}: {done.stdout.strip()}")
    return "\n".join(lines) + "\n"


PLACEMENT = {
    "mode": "planned", "summary": "n[1-4] (spares n5), 2 leaf switches under spine1",
    "plan": {"domain": "core", "roles": [
        {"node": "n1", "leaf": "leaf1", "spare": False, "ranks": [{"replica": 0, "stage": 0}]},
        {"node": "n2", "leaf": "leaf1", "spare": False, "ranks": [{"replica": 0, "stage": 1}]},
        {"node": "n3", "leaf": "leaf2", "spare": False, "ranks": [{"replica": 1, "stage": 0}]},
        {"node": "n4", "leaf": "leaf2", "spare": False, "ranks": [{"replica": 1, "stage": 1}]},
        {"node": "n5", "leaf": "leaf3", "spare": True, "ranks": []},
    ]},
}


def test_log_markers_phase_times_per_attempt() -> None:
    lines = [
        "[gantry 2026-11-30T10:00:00Z] job 7 (restart 0 of at most 3) on n[1-5]",
        "[gantry 2026-11-30T10:00:01Z] preflight on 5 nodes, level quick",
        "noise from a rank",
        "[gantry 2026-11-30T10:00:04Z] preflight step finished with exit code 1",
        "[gantry 2026-11-30T10:00:05Z] launching pp 2 x dp 2 on n1,n2,n4,n5",
        "[gantry 2026-11-30T10:00:35Z] training step failed with exit code 1",
        "[gantry 2026-11-30T10:01:00Z] job 7 (restart 1 of at most 3) on n[1-2,4-6]",
        "[gantry 2026-11-30T10:01:01Z] launching pp 2 x dp 2 on n1,n2,n4,n5",
        "[gantry 2026-11-30T10:01:21Z] training finished",
    ]
    marks = attempt_marks(lines)
    assert [m.restart for m in marks] == [0, 1]
    assert marks[0].phase_seconds() == {"preflight": 3.0, "gate": 1.0, "training": 30.0}
    assert marks[0].end_message.startswith("training step failed")
    assert marks[1].phase_seconds() == {"training": 20.0}
    assert parse_line("step 1/8 loss 4.0") is None


def test_watcher_reports_complete_lines_attempts_gate_and_steps(
        tmp_path: Path, labelled_verdicts: str) -> None:
    job = JobDir(tmp_path / "job")
    (job.path / "logs").mkdir(parents=True)
    (job.path / "placement.json").write_text(json.dumps(PLACEMENT))
    log = job.log_file("7")
    watcher = JobDirWatcher(job, "7", NODES)
    assert watcher.poll() == []
    log.write_text("[gantry 2026-11-30T10:00:00Z] job 7 (restart 0 of at most 3) on n[1-5]\n"
                   "half a li")
    attempt = job.path / "runs" / "7-0"
    attempt.mkdir(parents=True)
    (attempt / "preflight.jsonl").write_text(labelled_verdicts)
    (attempt / "nodes").write_text("n1,n2,n4,n5\n")
    events = watcher.poll()
    assert events[0] == AttemptStarted("7-0", attempt)  # no gate outcome before the launch
    assert events[1:] == [LogLines(("[gantry 2026-11-30T10:00:00Z] job 7 (restart 0 of at "
                                    "most 3) on n[1-5]",))]
    with log.open("a") as handle:
        handle.write("ne\n")
    (attempt / "launch_nodes").write_text("n1,n2,n4,n5\n")
    (attempt / "metrics.jsonl").write_text(metrics_line(1, 4.0) + "{bad\n"
                                           + metrics_line(2, 3.5)[:20])
    events = watcher.poll()
    assert events[-2] == LogLines(("half a line",))  # the log after the steps, then the gate
    done = events[-1]
    assert isinstance(done, PreflightDone)
    assert done.chosen == done.launch == ("n1", "n2", "n4", "n5")
    assert {n: v.status for n, v in done.verdicts.items()} == {
        "n1": "PASS", "n2": "PASS", "n3": "FAIL", "n4": "PASS", "n5": "PASS"}
    assert done.verdicts["n3"].drain_reason() == "gantry:net.ib_ports:mlx5_0-1-down"
    assert isinstance(events[0], StepDone) and events[0].record.step == 1
    assert isinstance(events[1], Note) and "skipped a metrics line" in events[1].text
    assert len(events) == 4  # the half-written step 2 waits
    with (attempt / "metrics.jsonl").open("a") as handle:
        handle.write(metrics_line(2, 3.5)[20:])
    events = watcher.poll()
    assert [e.record.step for e in events if isinstance(e, StepDone)] == [2]
    # A requeue: the next attempt's gate outcome is reported once it is over (final).
    second = job.path / "runs" / "7-1"
    second.mkdir()
    events = watcher.poll()
    assert events == [AttemptStarted("7-1", second)]
    events = watcher.poll(final=True)
    assert len(events) == 1 and isinstance(events[0], PreflightDone)
    assert events[0].verdicts == {} and events[0].launch == ()


def test_rows_tree_and_summary_after_a_spare_stepped_in(tmp_path: Path,
                                                        labelled_verdicts: str) -> None:
    job = JobDir(tmp_path / "job")
    attempt = job.path / "runs" / "7-0"
    attempt.mkdir(parents=True)
    (job.path / "logs").mkdir()
    (job.path / "placement.json").write_text(json.dumps(PLACEMENT))
    placement = read_placement(job.path / "placement.json")
    assert placement.role_of("n2") == PlannedRole("n2", "leaf1", ((0, 1),))
    (attempt / "preflight.jsonl").write_text(labelled_verdicts)
    (attempt / "launch_nodes").write_text("n1,n2,n4,n5\n")
    (attempt / "metrics.jsonl").write_text(metrics_line(1, 4.0) + metrics_line(2, 3.0))
    job.log_file("7").write_text(
        "[gantry 2026-11-30T10:00:10Z] job 7 (restart 0 of at most 3) on n[1-5]\n"
        "[gantry 2026-11-30T10:00:11Z] preflight on 5 nodes, level quick\n"
        "[gantry 2026-11-30T10:00:13Z] preflight step finished with exit code 1\n"
        "[gantry 2026-11-30T10:00:14Z] launching pp 2 x dp 2 on n1,n2,n4,n5\n"
        "[gantry 2026-11-30T10:00:44Z] training finished\n")
    state = FollowState()
    for event in JobDirWatcher(job, "7", NODES).poll(final=True):
        state.apply(event)
    drained = {"n3": NodeInfo("n3", "IDLE", ("DRAIN",), "gantry:net.ib_ports:mlx5_0-1-down")}
    info = JobInfo("7", "demo", "COMPLETED", exit_code=0)
    summary = summarize(state, "7", info, placement, drained, submitted_at=1796032808.0)
    assert summary.nodes_used == ("n1", "n2", "n4", "n5")
    assert summary.spares_used == ("n5",)
    assert [(e.node, e.outcome) for e in summary.excluded] == [
        ("n3", "excluded, drained: gantry:net.ib_ports:mlx5_0-1-down")]
    assert summary.loss_went_down and summary.steps == 2
    assert summary.phases == {"queued": 2.0, "preflight": 2.0, "gate": 1.0,
                              "training": 30.0, "total": 36.0}
    lines = summary_lines(summary)
    assert lines[1].startswith("loss went down: 4.0000 → 3.0000 (-1.0000) over 2 steps")
    assert "nodes used: n1, n2, n4, n5 (spare n5 stepped in)" in lines
    assert any(line.startswith("n3 excluded, drained: gantry:net.ib_ports:mlx5_0-1-down — "
                               "FAIL: net.ib_ports: mlx5_0/1: DOWN/Polling") for line in lines)
    assert lines[-1] == "time: queued 2 s · preflight 2 s · gate 1 s · training 30 s · total 36 s"

    outcomes = {"n1": "runs", "n2": "runs", "n3": "excluded, drained: gantry:net.ib_ports:x",
                "n4": "runs", "n5": "runs in n3's place (replica 1 · stage 0)"}
    topology = site_topology(load_site(DEFAULT_SITE))
    console = Console(width=120, record=True, color_system=None)
    console.print(placement_tree(topology, placement, outcomes))
    whole = console.export_text()
    assert whole.startswith("placement after the gate: n[1-4] (spares n5)")
    text = whole.split("\n", 1)[1]  # below the summary line
    assert text.index("core") < text.index("spine1") < text.index("leaf1") < text.index("n1")
    assert "n1  replica 0 · stage 0  ✓ runs" in text
    assert "n3  replica 1 · stage 0  ✗ excluded, drained: gantry:net.ib_ports:x" in text
    assert "n5  spare  ✓ runs in n3's place (replica 1 · stage 0)" in text
    assert "leaf3" in text and "spine2" in text


def test_loss_that_did_not_go_down_is_said_so() -> None:
    state = FollowState()
    for step, loss in ((1, 3.0), (2, 3.2)):
        state.records[step] = StepRecord(step, loss, 10.0, 1.0, 1.0, ())
    summary = summarize(state, "9", None, PlacementRecord("Slurm chooses", ()), {}, None)
    assert not summary.loss_went_down and summary.state == "UNKNOWN"
    assert summary_lines(summary)[1].startswith("loss did NOT go down: 3.0000 → 3.2000")


def test_eta_from_recent_step_times() -> None:
    def rec(step: int, seconds: float) -> StepRecord:
        timing = RankTiming(seconds / 2, 0.0, 0.0, 0.0, 0.0, seconds)
        return StepRecord(step, 1.0, 1.0, 1.0, 1.0, (timing,))

    clock = StepClock(window=2)
    assert clock.eta(1, 10) is None
    for step, seconds in ((1, 9.0), (2, 1.0), (3, 3.0)):
        clock.add(rec(step, seconds))
    assert clock.eta(3, 10) == pytest.approx(14.0)  # 2 s/step over the last 2 steps
    assert clock.eta(3, None) is None
    clock.add(StepRecord(4, 1.0, 1.0, 1.0, 1.0, ()))  # no timings: ignored
    assert clock.eta(4, 10) == pytest.approx(12.0)
    assert format_eta(75.4) == "01:15" and format_eta(None) == "--:--"


def test_recoveries_in_the_allocation_reach_the_live_view(tmp_path: Path) -> None:
    job = JobDir(tmp_path / "job")
    (job.path / "logs").mkdir(parents=True)
    (job.path / "runs" / "7-0").mkdir(parents=True)
    watcher = JobDirWatcher(job, "7", NODES)
    watcher.poll()
    (job.path / "runs" / "7-0.1").mkdir()
    record = {"attempt": "7-0", "decision": "relaunch", "culprits": {"n2": "rank1-killed"},
              "replaced": {"n2": "n5"}, "time": 110.0, "fault_time": 100.0}
    with (job.path / "recoveries.jsonl").open("w") as handle:
        handle.write(json.dumps(record) + "\n" + '{"attempt": "7-0.1", "decis')
    events = watcher.poll()
    assert AttemptStarted("7-0.1", job.path / "runs" / "7-0.1") in events
    recovered = [e for e in events if isinstance(e, Recovered)]
    assert recovered == [Recovered(
        "7-0: rank1-killed on n2; relaunched with n5 for n2, 10.0 s after the fault")]
    with (job.path / "recoveries.jsonl").open("a") as handle:
        handle.write('ion": "requeue", "culprits": {"n5": "node-lost"}}\n')
    [line] = [e for e in watcher.poll() if isinstance(e, Recovered)]
    assert line.line == "7-0.1: node-lost on n5; requeued (no healthy spare left)"
    state = FollowState()
    for event in [*recovered, line]:
        state.apply(event)
    assert state.recoveries == [recovered[0].line, line.line]


def test_a_node_the_fabric_test_named_is_a_failed_row(tmp_path: Path,
                                                      labelled_verdicts: str) -> None:
    job = JobDir(tmp_path / "job")
    attempt = job.path / "runs" / "7-0"
    attempt.mkdir(parents=True)
    (job.path / "logs").mkdir()
    (job.path / "placement.json").write_text(json.dumps(PLACEMENT))
    placement = read_placement(job.path / "placement.json")
    (attempt / "preflight.jsonl").write_text(labelled_verdicts)
    reason = "gantry:fabric.node:links-9.0x-slower"
    (attempt / "gate.json").write_text(json.dumps({"fabric": {
        "status": "FAIL", "message": "fabric FAIL: slow node n2 (...)",
        "culprits": {"n2": reason}}}))
    (attempt / "launch_nodes").write_text("n1,n4,n5\n")
    state = FollowState()
    for event in JobDirWatcher(job, "7", NODES).poll(final=True):
        state.apply(event)
    [done] = state.preflight
    assert done.fabric is not None and done.fabric["message"].startswith("fabric FAIL")
    drained = {"n2": NodeInfo("n2", "IDLE", ("DRAIN",), reason)}
    summary = summarize(state, "7", JobInfo("7", "demo", "COMPLETED", exit_code=0),
                        placement, drained, submitted_at=None)
    excluded = {e.node: e for e in summary.excluded}
    assert excluded["n2"].status == "FAIL"
    assert excluded["n2"].finding == f"fabric test: {reason}"
    assert excluded["n2"].outcome == f"excluded, drained: {reason}"
    assert excluded["n3"].finding.startswith("net.ib_ports")  # a node check's row as before
