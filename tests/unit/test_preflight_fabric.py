"""The fabric verdict (launcher/preflight/fabric_judge.py) and its ring orders: a slow node is
named, a slow link names its two nodes, a healthy set passes, noise below the floor passes,
and the gate fails the named nodes like a node check."""

from __future__ import annotations

import json

import pytest

from launcher.errors import UserInputError
from launcher.preflight.fabric_fault import parse_slow_fabric
from launcher.preflight.fabric_judge import judge
from launcher.preflight.fabric_result import (
    FabricResult,
    LinkTime,
    Ring,
    result_from_json,
    ring_orders,
)
from launcher.preflight.gate import NodeOutcome, decide, with_fabric
from launcher.site_config import FabricSection

MS = 1e-3


def result(n: int, slow: dict[frozenset[str], float] | None = None, base: float = 1 * MS,
           noise: dict[int, float] | None = None, nbytes: int = 1 << 20) -> FabricResult:
    """A record over n1..nN: every link ``base`` (plus per-link ``noise`` by link number),
    a link in ``slow`` that much slower."""
    nodes = [f"n{i + 1}" for i in range(n)]
    rings, k = [], 0
    for order in ring_orders(n):
        links = []
        for i, p in enumerate(order):
            src, dst = nodes[p], nodes[order[(i + 1) % n]]
            extra = (slow or {}).get(frozenset((src, dst)), 0.0) + (noise or {}).get(k, 0.0)
            links.append(LinkTime(src, dst, base + extra))
            k += 1
        rings.append(Ring([nodes[p] for p in order], links))
    return FabricResult("mpi", nbytes, 3, nodes, 2 * MS, rings)


def slow_node(node: str, n: int, seconds: float) -> dict[frozenset[str], float]:
    return {frozenset((node, f"n{i + 1}")): seconds for i in range(n) if f"n{i + 1}" != node}


@pytest.mark.parametrize("n", range(2, 13))
def test_ring_orders_visit_every_node_and_the_second_ring_adds_new_pairs(n: int) -> None:
    orders = ring_orders(n)
    assert len(orders) == (1 if n <= 3 else 2)
    for order in orders:
        assert sorted(order) == list(range(n))
    if n >= 5:  # edge-disjoint: a slow link sits in one ring only
        first = {frozenset((i, (i + 1) % n)) for i in range(n)}
        second = {frozenset((o, orders[1][(i + 1) % n])) for i, o in enumerate(orders[1])}
        assert not first & second and len(second) == n


@pytest.mark.parametrize("n", [3, 4, 5, 8, 9])
def test_a_slow_node_is_named_and_only_it(n: int) -> None:
    verdict = judge(result(n, slow_node("n3", n, 0.2)), FabricSection())
    assert verdict.status == "FAIL"
    assert verdict.slow_nodes == ["n3"] and verdict.slow_links == []
    assert list(verdict.culprits) == ["n3"]
    assert verdict.culprits["n3"].startswith("gantry:fabric.node:links-")
    assert "slow node n3" in verdict.message


@pytest.mark.parametrize("n", [3, 5, 8])
def test_a_slow_link_names_both_of_its_nodes(n: int) -> None:
    verdict = judge(result(n, {frozenset(("n2", "n3")): 0.2}), FabricSection())
    assert verdict.status == "FAIL"
    assert verdict.slow_nodes == [] and verdict.slow_links == [("n2", "n3")]
    assert verdict.culprits == {"n2": "gantry:fabric.link:n2-n3-slow",
                                "n3": "gantry:fabric.link:n2-n3-slow"}


@pytest.mark.parametrize("n", [2, 3, 8])
def test_a_healthy_set_passes(n: int) -> None:
    verdict = judge(result(n), FabricSection())
    assert verdict.status == "PASS" and verdict.culprits == {}
    assert verdict.message.startswith(f"fabric PASS on {n} nodes")


def test_noise_under_the_floor_passes_and_over_it_fails() -> None:
    # Loaded 2-core host: links of 0.6-10 ms (measured), some 40 ms slower than the rest.
    noisy = {1: 40 * MS, 6: 45 * MS, 11: 30 * MS}
    assert judge(result(8, noise=noisy), FabricSection()).status == "PASS"
    verdict = judge(result(8, noise=noisy), FabricSection(slow_link_excess_ms=10))
    assert verdict.status == "FAIL" and verdict.slow_links


def test_two_nodes_are_judged_only_by_the_absolute_minimum() -> None:
    slow = result(2, base=100 * MS)  # 1 MiB in 100 ms: 0.01 GB/s
    assert judge(slow, FabricSection()).status == "PASS"
    verdict = judge(slow, FabricSection(min_link_gbps=1.0))
    assert verdict.slow_links == [("n1", "n2")] and set(verdict.culprits) == {"n1", "n2"}


def test_low_bus_bandwidth_without_a_slow_link_fails_but_names_nobody() -> None:
    verdict = judge(result(4), FabricSection(min_busbw_gbps=1000))
    assert verdict.status == "FAIL" and verdict.culprits == {}
    assert "nothing excluded" in verdict.message


def test_the_gate_fails_the_named_node_and_a_spare_takes_its_place() -> None:
    nodes = ["n1", "n2", "n3", "n4"]
    verdict = judge(result(4, slow_node("n2", 4, 0.2)), FabricSection())
    outcomes = with_fabric([NodeOutcome(n, "PASS", None) for n in nodes], verdict)
    assert [o.status for o in outcomes] == ["PASS", "FAIL", "PASS", "PASS"]
    assert outcomes[1].failing == ["fabric.node"]
    decision = decide(nodes, outcomes, 3, "77")
    assert decision.decision == "go" and decision.nodes == ["n1", "n3", "n4"]
    assert decide(nodes, outcomes, 4, "77").decision == "requeue"


def test_record_round_trips_and_bad_records_are_one_line_errors() -> None:
    record = result(5, slow_node("n1", 5, 0.1))
    back = result_from_json("noise\n" + json.dumps(record.to_dict()) + "\n", "fabric.json")
    assert back == record
    with pytest.raises(UserInputError, match=r"fabric\.json: no fabric test record"):
        result_from_json("", "fabric.json")
    data = record.to_dict()
    data["rings"][0]["links"][0]["dst"] = "n99"
    with pytest.raises(UserInputError, match=r"rings\[0\]\.links\[0\]"):
        result_from_json(json.dumps(data), "fabric.json")


@pytest.mark.parametrize("value", ["n3", "n3:", ":1", "n3:-1", "n3:nan", "n3:1e9"])
def test_slow_fabric_hook_refuses_malformed_values(value: str) -> None:
    with pytest.raises(UserInputError, match="GANTRY_FAULT_SLOW_FABRIC"):
        parse_slow_fabric(value)
    assert parse_slow_fabric("n3:0.25") == ("n3", 0.25)
