"""The gate follows the job's plan: planned rank nodes that pass are kept, healthy spares (the
plan's first) take the places of the others, and the places they take are the ones the
trainer's rank-order file gives them."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Literal

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from launcher.errors import UserInputError
from launcher.live.preflight_rows import PlannedRole, preflight_rows, read_placement
from launcher.placement_record import PlacementRecord
from launcher.preflight.gate import NodeOutcome, decide, outcomes_for
from launcher.preflight.gate_plan import NodePlan, choose_nodes, read_node_plan
from launcher.preflight.result import CheckResult
from launcher.preflight.verdict import NodeVerdict
from launcher.train.layout import order_from_nodes


def verdict(node: str, failing: bool) -> NodeVerdict:
    status: Literal["PASS", "FAIL"] = "FAIL" if failing else "PASS"
    check = CheckResult("gpu.row_remap", status, "1 pending" if failing else "0", "0",
                        detail="gpu1-pending")
    return NodeVerdict(node=node, level="quick", status=status,
                       started_at="2026-11-30T12:00:00+00:00", duration_s=0.1,
                       gantry_version="0", gpu_source="none", checks=[check])


def outcomes(nodes: list[str], failing: set[str]) -> list[NodeOutcome]:
    return outcomes_for(nodes, {n: verdict(n, n in failing) for n in nodes})


def nodes_of(count: int) -> list[str]:
    return [f"n{i}" for i in range(1, count + 1)]


def test_failed_planned_node_is_replaced_by_the_planned_spare() -> None:
    allocated = nodes_of(6)  # n1 and n6 are allocated but not in the plan
    plan = NodePlan(rank_nodes=("n2", "n3", "n5"), spare_nodes=("n4",))
    found = outcomes(allocated, {"n3"})
    go = decide(allocated, found, need=3, job_id="7", plan=plan)
    assert go.decision == "go" and go.nodes == ["n2", "n4", "n5"]
    assert go.replaced == [("n3", "n4")] and go.planned == ["n2", "n3", "n5"]
    assert go.excluded == ["n3"]
    assert go.message == ("go: 3 healthy nodes n[2,4-5], excluded n3, n4 takes planned n3's "
                          "place, 2 spare left unused")
    # Without the plan the gate takes the first healthy nodes, ignoring it.
    assert decide(allocated, found, need=3, job_id="7").nodes == ["n1", "n2", "n4"]


def test_all_planned_nodes_pass_so_the_plan_runs_as_is() -> None:
    allocated = nodes_of(4)
    plan = NodePlan(rank_nodes=("n4", "n2", "n3"), spare_nodes=("n1",))
    go = decide(allocated, outcomes(allocated, set()), need=3, job_id="7", plan=plan)
    assert go.nodes == ["n2", "n3", "n4"] and go.replaced == []
    assert go.message == "go: 3 healthy nodes n[2-4] (as planned), 1 spare left unused"


def test_failed_spare_is_skipped_for_a_healthy_unplanned_node() -> None:
    allocated = nodes_of(4)
    plan = NodePlan(rank_nodes=("n1", "n2"), spare_nodes=("n3",))
    go = decide(allocated, outcomes(allocated, {"n2", "n3"}), need=2, job_id="7", plan=plan)
    assert go.nodes == ["n1", "n4"] and go.replaced == [("n2", "n4")]
    assert go.excluded == ["n2", "n3"]


def test_planned_node_outside_the_allocation_is_replaced() -> None:
    # A requeued job held to its domain switch may get nodes the plan did not name.
    allocated = ["n1", "n3", "n5", "n6"]
    plan = NodePlan(rank_nodes=("n1", "n2", "n3"), spare_nodes=("n4",))
    go = decide(allocated, outcomes(allocated, set()), need=3, job_id="7", plan=plan)
    assert go.nodes == ["n1", "n3", "n5"] and go.replaced == [("n2", "n5")]


def test_two_replacements_pair_as_the_trainer_maps_them() -> None:
    allocated = nodes_of(6)
    plan = NodePlan(rank_nodes=("n4", "n1", "n2", "n3"), spare_nodes=("n6", "n5"))
    go = decide(allocated, outcomes(allocated, {"n4", "n2"}), need=4, job_id="7", plan=plan)
    assert go.nodes == ["n1", "n3", "n5", "n6"]
    assert go.replaced == [("n4", "n5"), ("n2", "n6")]
    # srun numbers ranks in allocation order: the trainer puts n5 in n4's place, n6 in n2's.
    order = order_from_nodes(list(plan.rank_nodes), go.nodes, "test")
    assert [go.nodes[w] for w in order] == ["n5", "n1", "n6", "n3"]


def test_too_few_healthy_nodes_still_requeues() -> None:
    allocated = nodes_of(3)
    plan = NodePlan(rank_nodes=("n1", "n2"), spare_nodes=("n3",))
    found = outcomes(allocated, {"n1", "n3"})
    again = decide(allocated, found, need=2, job_id="7", plan=plan)
    assert again.decision == "requeue" and again.excluded == ["n1", "n3"]
    assert choose_nodes(allocated, ["n2"], 2, plan) is None


@settings(max_examples=200, deadline=None)
@given(
    size=st.integers(2, 9),
    data=st.data(),
)
def test_choice_keeps_every_healthy_planned_node_and_agrees_with_the_trainer(
    size: int, data: st.DataObject
) -> None:
    names = nodes_of(size + 3)
    allocated = sorted(data.draw(st.sets(st.sampled_from(names), min_size=size, max_size=size)),
                       key=lambda n: int(n[1:]))
    need = data.draw(st.integers(1, size))
    planned_pool = data.draw(st.permutations(names))
    plan = NodePlan(tuple(planned_pool[:need]),
                    tuple(planned_pool[need:need + data.draw(st.integers(0, 3))]))
    failing = data.draw(st.sets(st.sampled_from(allocated)))
    healthy = [n for n in allocated if n not in failing]
    choice = choose_nodes(allocated, healthy, need, plan)
    if len(healthy) < need:
        assert choice is None
        return
    assert choice is not None
    assert len(choice.nodes) == need and set(choice.nodes) <= set(healthy)
    assert choice.nodes == [n for n in allocated if n in choice.nodes]
    assert {n for n in plan.rank_nodes if n in healthy} <= set(choice.nodes)
    fills = [n for n in choice.nodes if n not in plan.rank_nodes]
    healthy_spares = [n for n in plan.spare_nodes if n in healthy]
    assert set(healthy_spares[:len(fills)]) <= set(fills)  # planned spares come first
    # The places the gate reports are the places the trainer gives the fill nodes.
    order = order_from_nodes(list(plan.rank_nodes), choice.nodes, "test")
    played = dict(zip(plan.rank_nodes, (choice.nodes[w] for w in order), strict=True))
    assert choice.replaced == [(p, n) for p, n in played.items() if p != n]


def test_live_view_names_the_place_a_spare_took() -> None:
    roles = tuple(PlannedRole(n, "leaf", ((r, st_),)) for n, r, st_ in
                  (("n1", 0, 0), ("n2", 0, 1), ("n3", 1, 0), ("n4", 1, 1)))
    placement = PlacementRecord("n[1-4] (spares n5)", (*roles, PlannedRole("n5", "leaf3", ())))
    allocated = nodes_of(5)
    verdicts = {n: verdict(n, n == "n2") for n in allocated}
    go = decide(allocated, outcomes(allocated, {"n2"}), need=4, job_id="7",
                plan=NodePlan(("n1", "n2", "n3", "n4"), ("n5",)))
    rows = preflight_rows(verdicts, placement, go.nodes, go.nodes, {})
    assert {r.node: r.outcome for r in rows} == {
        "n1": "runs", "n2": "excluded", "n3": "runs", "n4": "runs",
        "n5": "runs in n2's place (replica 0 · stage 1)"}


def test_live_view_says_what_a_setup_error_is() -> None:
    """A node whose gpu.gemm check could not run (gantry's install lacks torch) is ERROR: the
    live row says the setup error and what to install, never "all checks passed"."""
    placement = PlacementRecord("n[1-2]", tuple(PlannedRole(n, "leaf", ((0, s),)) for n, s in
                                                (("n1", 0), ("n2", 1))))
    missing = CheckResult("gpu.gemm", "ERROR", "cannot import torch", "",
                          action="install torch into gantry's environment")
    verdicts = {"n1": verdict("n1", False),
                "n2": NodeVerdict(node="n2", level="standard", status="ERROR",
                                  started_at="2026-11-30T12:00:00+00:00", duration_s=0.1,
                                  gantry_version="0", gpu_source="none", checks=[missing])}
    rows = {r.node: r for r in preflight_rows(verdicts, placement, ["n1", "n2"],
                                              ["n1", "n2"], {})}
    assert (rows["n2"].status, rows["n2"].outcome) == ("ERROR", "runs")
    assert rows["n2"].finding == ("setup error, gpu.gemm: cannot import torch (install torch "
                                  "into gantry's environment)")
    assert rows["n1"].finding == "all checks passed"


def roles_json(ranks: list[str], spares: list[str]) -> list[dict[str, object]]:
    """plan.roles as gantry submit writes them: rank nodes in rank order, then spares."""
    return [*({"node": n, "leaf": "leaf1", "spare": False,
               "ranks": [{"replica": 0, "stage": i}]} for i, n in enumerate(ranks)),
            *({"node": n, "leaf": "leaf2", "spare": True, "ranks": []} for n in spares)]


def test_read_node_plan(tmp_path: Path) -> None:
    path = tmp_path / "placement.json"
    path.write_text(json.dumps({"mode": "planned", "summary": "x",
                                "plan": {"domain": "core", "roles": roles_json(["n2", "n1"],
                                                                               ["n5"])}}))
    assert read_node_plan(path) == NodePlan(("n2", "n1"), ("n5",))
    path.write_text(json.dumps({"mode": "slurm", "plan": {"roles": roles_json(["n1"], [])}}))
    assert read_node_plan(path) is None
    path.write_text(json.dumps({"mode": "none", "plan": None}))
    assert read_node_plan(path) is None


def planned(roles: object) -> str:
    return json.dumps({"mode": "planned", "plan": {"roles": roles}})


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("{not json", "not valid JSON"),
        ("[1, 2]", "expected a JSON object"),
        (json.dumps({"plan": None}), "mode: None is not allowed (expected planned or slurm"),
        (json.dumps({"mode": "planned", "plan": []}), "plan: [] is not allowed"),
        (planned(None), "plan.roles: None is not allowed"),
        (planned([{"node": 3}]), "plan.roles[0].node: 3 is not allowed"),
        (planned([{"node": "n1", "ranks": [{"replica": -1, "stage": 0}]}]),
         "plan.roles[0].ranks.replica: -1 is not allowed"),
        (planned(roles_json(["n1"], ["n1"])), "plan.roles: ['n1'] is not allowed (expected "
                                               "each node named once)"),
    ],
)
def test_bad_placement_is_a_one_line_error(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "placement.json"
    path.write_text(text)
    with pytest.raises(UserInputError, match=str(path)) as err:
        read_node_plan(path)
    assert message in str(err.value) and "\n" not in str(err.value)


def test_the_live_view_reads_the_record_the_gate_reads(tmp_path: Path) -> None:
    path = tmp_path / "placement.json"
    path.write_text(json.dumps({"mode": "planned", "summary": "n[1-2] (spares n3)",
                                "plan": {"domain": "core",
                                         "roles": roles_json(["n2", "n1"], ["n3"])}}))
    shown = read_placement(path)
    assert (shown.rank_nodes, shown.spare_nodes, shown.domain) == (("n2", "n1"), ("n3",), "core")
    assert read_node_plan(path) == NodePlan(shown.rank_nodes, shown.spare_nodes)
    path.write_text(planned([{"node": 3}]))  # the gate refuses it; the live view goes on
    assert read_placement(path).roles == ()
    assert read_placement(path).summary.startswith(f"unknown ({path}: plan.roles[0].node")


def test_gate_cli_rejects_a_bad_placement_before_doing_anything(tmp_path: Path) -> None:
    site = tmp_path / "site.yaml"
    site.write_text(f'name: t\nnodes: {{names: "n[1-2]", cpus: 1, real_memory_mb: 1}}\n'
                    f"preflight: {{state_dir: {tmp_path / 'state'}}}\n")
    placement = tmp_path / "placement.json"
    placement.write_text(planned("n1"))
    result = subprocess.run(
        [sys.executable, "-m", "launcher", "gate", "--nodes", "n[1-2]", "--site", str(site),
         "--placement", str(placement), "--need", "1"],
        capture_output=True, text=True, check=False)
    assert result.returncode == 2, result.stderr
    assert result.stderr.strip() == (
        f"error: {placement}: plan.roles: 'n1' is not allowed (expected a list of roles)")
    assert not (tmp_path / "state").exists()


def test_a_node_verdict_cannot_put_a_line_break_into_the_drain_reason() -> None:
    check = CheckResult("x\ny; rm -rf /", "FAIL", "bad", "good", detail="a b\nc:d")
    bad = NodeVerdict(node="n1", level="quick", status="FAIL",
                      started_at="2026-11-30T12:00:00+00:00", duration_s=0.1,
                      gantry_version="0", gpu_source="none", checks=[check])
    assert bad.drain_reason() == "gantry:x-y-rm--rf-/:a-b-c-d"


def test_a_fail_verdict_without_a_failing_check_still_fails_the_node() -> None:
    empty = NodeVerdict(node="n1", level="quick", status="FAIL",
                        started_at="2026-11-30T12:00:00+00:00", duration_s=0.1,
                        gantry_version="0", gpu_source="none", checks=[])
    [outcome] = outcomes_for(["n1"], {"n1": empty})
    assert outcome.reason == "gantry:preflight:failed"
    decision = decide(["n1", "n2"], [outcome, *outcomes(["n2"], set())], 1, "7")
    assert decision.excluded == ["n1"] and decision.nodes == ["n2"]
