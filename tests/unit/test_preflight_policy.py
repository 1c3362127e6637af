"""Drain policy (operator reasons untouched, resume own after K passes, rate limit), the
scontrol output parser, and the gate's verdict reading and decision."""

from __future__ import annotations

import json

import pytest

from launcher.errors import UserInputError
from launcher.preflight.drain_policy import NodeState, PolicyConfig, plan
from launcher.preflight.gate import decide, outcomes_for, read_verdicts, split_labelled
from launcher.preflight.result import CheckResult
from launcher.preflight.slurm_nodes import parse_show_node
from launcher.preflight.state import NodeHistory
from launcher.preflight.verdict import NodeVerdict, verdict_from_json

NOW = 1_000_000.0
CFG = PolicyConfig(
    resume_after_passes=3, max_drain_fraction=0.25, drain_window_s=3600, cluster_size=8
)
REASON = "gantry:gpu.row_remap:gpu1-pending"


def kinds(actions: list) -> dict[str, str]:  # type: ignore[type-arg]
    return {a.node: a.kind for a in actions}


def test_failed_idle_node_is_drained_with_owned_reason() -> None:
    actions, hist = plan({"n3": REASON}, {"n3": NodeState("n3", "ALLOCATED")}, {}, [], CFG, NOW)
    assert kinds(actions) == {"n3": "drain"} and actions[0].reason == REASON
    assert hist["n3"].drained_by_gantry and hist["n3"].drained_at == NOW


def test_operator_reason_is_never_overwritten_nor_resumed() -> None:
    states = {"n5": NodeState("n5", "IDLE+DRAIN", "bad DIMM, ticket 123")}
    actions, _ = plan({"n5": REASON}, states, {}, [], CFG, NOW)
    assert kinds(actions) == {"n5": "keep"} and "operator" in actions[0].note
    history = {"n5": NodeHistory("n5", clean_passes=10)}
    actions, _ = plan({"n5": None}, states, history, [], CFG, NOW)
    assert kinds(actions) == {"n5": "keep"}
    # an operator reason on a node that is not drained (e.g. a note) is left alone too
    actions, _ = plan(
        {"n6": REASON}, {"n6": NodeState("n6", "IDLE", "watch this one")}, {}, [], CFG, NOW
    )
    assert kinds(actions) == {"n6": "keep"}


def test_own_drain_resumes_only_after_k_clean_passes() -> None:
    states = {"n3": NodeState("n3", "IDLE+DRAIN", REASON)}
    hist = {
        "n3": NodeHistory("n3", drained_by_gantry=True, drain_reason=REASON, drained_at=NOW - 10)
    }
    for expected_pass in (1, 2):
        actions, hist = plan({"n3": None}, states, hist, [], CFG, NOW)
        assert kinds(actions) == {"n3": "keep"}
        assert hist["n3"].clean_passes == expected_pass
    actions, hist = plan({"n3": None}, states, hist, [], CFG, NOW)
    assert kinds(actions) == {"n3": "resume"} and not hist["n3"].drained_by_gantry


def test_a_failure_resets_the_clean_pass_streak() -> None:
    states = {"n3": NodeState("n3", "IDLE+DRAIN", REASON)}
    hist = {"n3": NodeHistory("n3", clean_passes=2, drained_by_gantry=True)}
    actions, hist = plan({"n3": REASON}, states, hist, [], CFG, NOW)
    assert kinds(actions) == {"n3": "keep"} and hist["n3"].clean_passes == 0
    actions, hist = plan({"n3": None}, states, hist, [], CFG, NOW)
    assert kinds(actions) == {"n3": "keep"}


def test_rate_limit_caps_drains_per_window() -> None:
    outcomes = {f"n{i}": REASON for i in range(1, 9)}
    states = {n: NodeState(n, "ALLOCATED") for n in outcomes}
    actions, _ = plan(outcomes, states, {}, [], CFG, NOW)
    drained = [a.node for a in actions if a.kind == "drain"]
    assert len(drained) == 2  # floor(0.25 * 8)
    limited = [a for a in actions if a.kind == "keep"]
    assert all("rate limit" in a.note for a in limited) and len(limited) == 6


def test_rate_limit_counts_earlier_drains_in_window_only() -> None:
    earlier = [NodeHistory("n7", drained_at=NOW - 100), NodeHistory("n8", drained_at=NOW - 100)]
    states = {"n1": NodeState("n1", "ALLOCATED")}
    actions, _ = plan({"n1": REASON}, states, {}, earlier, CFG, NOW)
    assert kinds(actions) == {"n1": "keep"}
    old = [NodeHistory("n7", drained_at=NOW - 7200), NodeHistory("n8", drained_at=NOW - 7200)]
    actions, _ = plan({"n1": REASON}, states, {}, old, CFG, NOW)
    assert kinds(actions) == {"n1": "drain"}


def test_small_cluster_may_still_drain_one() -> None:
    cfg = PolicyConfig(max_drain_fraction=0.01, cluster_size=8)
    assert cfg.max_drains == 1


def test_draining_disabled() -> None:
    cfg = PolicyConfig(enabled=False, cluster_size=8)
    actions, _ = plan({"n1": REASON}, {"n1": NodeState("n1", "IDLE")}, {}, [], cfg, NOW)
    assert kinds(actions) == {"n1": "keep"}


SHOW_NODE = (
    "NodeName=n1 Arch=x86_64 CoresPerSocket=1 CPUAlloc=0 CPUEfctv=2 CPUTot=2 CPULoad=0.00 "
    "AvailableFeatures=(null) ActiveFeatures=(null) Gres=(null) NodeAddr=localhost "
    "NodeHostName=localhost Port=17001 Version=22.05.8 OS=Linux RealMemory=2000 "
    "AllocMem=0 FreeMem=N/A Sockets=2 Boards=1 State=IDLE ThreadsPerCore=1 TmpDisk=0 "
    "Weight=1 Owner=N/A MCS_label=N/A Partitions=debug BootTime=None SlurmdStartTime=None "
    "LastBusyTime=2026-11-30T12:00:00 CfgTRES=cpu=2,mem=2000M,billing=2 AllocTRES= "
    "CapWatts=n/a CurrentWatts=0 AveWatts=0 ExtSensorsJoules=n/s ExtSensorsWatts=0 "
    "ExtSensorsTemp=n/s\n"
    "NodeName=n3 Arch=x86_64 State=IDLE+DRAIN ThreadsPerCore=1 Partitions=debug "
    "Reason=gantry:gpu.row_remap:gpu1-pending [root@2026-11-30T12:01:02]\n"
    "NodeName=n5 Arch=x86_64 State=MIXED+DRAIN Partitions=debug "
    "Reason=bad DIMM, see ticket 123 [alice@2026-11-30T11:00:00]\n"
)


def test_parse_show_node() -> None:
    nodes = parse_show_node(SHOW_NODE)
    assert nodes["n1"] == NodeState("n1", "IDLE", None)
    assert nodes["n3"].reason == REASON and nodes["n3"].owned and nodes["n3"].drained
    assert nodes["n5"].reason == "bad DIMM, see ticket 123" and nodes["n5"].operator_reason
    assert not nodes["n1"].drained


def verdict(node: str, failing: str | None = None) -> NodeVerdict:
    checks = [CheckResult("host.cpus", "PASS", "2", ">= 2")]
    if failing:
        checks.append(CheckResult(failing, "FAIL", "bad", "good", detail="gpu1-pending"))
    return NodeVerdict(
        node=node,
        level="quick",
        status="FAIL" if failing else "PASS",
        started_at="2026-11-30T12:00:00+00:00",
        duration_s=0.1,
        gantry_version="0",
        gpu_source="none",
        checks=checks,
    )


def labelled(verdicts: list[NodeVerdict], chunk: int = 100) -> str:
    """One-line JSON per task, cut into labelled chunks the way srun --label forwards it."""
    per_task = []
    for task, v in enumerate(verdicts):
        text = json.dumps(v.to_dict())
        per_task.append([f"{task}: {text[i : i + chunk]}" for i in range(0, len(text), chunk)])
    # interleave the tasks' lines the way srun may deliver them (each task's order kept)
    merged = []
    for i in range(max(len(t) for t in per_task)):
        merged += [t[i] for t in per_task if i < len(t)]
    return "\n".join(merged)


def test_read_verdicts_from_interleaved_labelled_output() -> None:
    nodes = ["n1", "n2", "n3"]
    text = labelled([verdict("n1"), verdict("n3", "gpu.row_remap")]) + "\n7: garbage\n"
    verdicts, problems = read_verdicts(text, nodes)
    assert sorted(verdicts) == ["n1", "n3"]
    assert "task7" in problems
    outcomes = outcomes_for(nodes, verdicts)
    assert [(o.node, o.status, o.reason) for o in outcomes] == [
        ("n1", "PASS", None),
        ("n2", "MISSING", "gantry:preflight:no-verdict"),
        ("n3", "FAIL", REASON),
    ]
    assert split_labelled('0: {"a": \n1: b\n0: 1}') == {0: '{"a": 1}', 1: "b"}


def test_decide_go_with_spares_or_requeue() -> None:
    nodes = ["n1", "n2", "n3", "n4"]
    outcomes = outcomes_for(
        nodes,
        {
            "n1": verdict("n1"),
            "n2": verdict("n2"),
            "n3": verdict("n3", "gpu.row_remap"),
            "n4": verdict("n4"),
        },
    )
    go = decide(nodes, outcomes, need=3, job_id="42")
    assert go.decision == "go" and go.nodes == ["n1", "n2", "n4"] and go.excluded == ["n3"]
    again = decide(nodes, outcomes, need=4, job_id="42")
    assert again.decision == "requeue" and again.excluded == ["n3"]
    assert decide(nodes, outcomes, need=4, job_id=None).decision == "abort"
    nothing = outcomes_for(nodes, {})
    assert decide(nodes, nothing, need=1, job_id="42").decision == "abort"


@pytest.mark.parametrize(
    "text",
    [
        "not json",
        json.dumps({"schema": "other", "version": 1}),
        json.dumps({**verdict("n1").to_dict(), "version": 99}),
        json.dumps({**verdict("n1").to_dict(), "status": "MAYBE"}),
    ],
)
def test_bad_verdicts_are_one_line_errors(text: str) -> None:
    with pytest.raises(UserInputError) as err:
        verdict_from_json(text, "task 0")
    assert str(err.value).startswith("task 0") and "\n" not in str(err.value)


def test_read_verdicts_from_unlabelled_json_lines() -> None:
    """The batch script's own srun step (no --label) writes one JSON line per node."""
    text = "\n".join(json.dumps(v.to_dict()) for v in (verdict("n2"), verdict("n1", "gpu.ecc")))
    verdicts, problems = read_verdicts(text + "\n", ["n1", "n2"])
    assert sorted(verdicts) == ["n1", "n2"] and problems == {}
    assert verdicts["n1"].status == "FAIL"
