"""Placement: hypothesis properties on random trees and block layouts, brute-force optima.

For every random topology, cluster state and request: the chosen nodes are free, healthy,
distinct and N+S of them, never span switches without a common parent (tree) / stay in one
Slurm block group (block); on these small topologies the span equals the brute-force optimum
(and, on trees, the common switch is the lowest possible); the rank order covers every stage
of every replica; the Slurm options name exactly the chosen nodes.
"""

from __future__ import annotations

import re

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from launcher.errors import GantryError
from launcher.site_config import DEFAULT_SITE, load_site
from launcher.site_topology import site_topology
from tests.unit.topology_helpers import brute_force_block, brute_force_tree, conf
from topology import hostlists
from topology.model import Topology
from topology.placement import (
    ClusterState,
    Placement,
    PlacementRequest,
    SlurmVersion,
    plan_placement,
)

V2205 = SlurmVersion.parse("22.05.8")
V2311 = SlurmVersion.parse("23.11.0")
V2411 = SlurmVersion.parse("24.11.1")


@st.composite
def random_trees(draw: st.DrawFn) -> Topology:
    sizes = draw(st.lists(st.integers(0, 3), min_size=1, max_size=5))
    if not any(sizes):
        sizes[0] = 1
    lines: list[str] = []
    node = 1
    current: list[str] = []
    for i, size in enumerate(sizes):
        nodes = f" Nodes=n[{node}-{node + size - 1}]" if size else ""
        lines.append(f"SwitchName=l0s{i}{nodes}")
        current.append(f"l0s{i}")
        node += size
    for level in range(1, draw(st.integers(0, 2)) + 1):
        groups: list[list[str]] = []
        i = 0
        while i < len(current):
            width = draw(st.integers(1, 3))
            groups.append(current[i : i + width])
            i += width
        current = []
        for j, group in enumerate(groups):
            lines.append(f"SwitchName=l{level}s{j} Switches={','.join(group)}")
            current.append(f"l{level}s{j}")
    return conf("\n".join(lines))


@st.composite
def random_blocks(draw: st.DrawFn) -> Topology:
    base = draw(st.integers(1, 3))
    count = draw(st.integers(1, 6))
    sizes = draw(st.sampled_from([None, (base,), (base, 2 * base), (base, 4 * base)]))
    lines = [f"BlockSizes={','.join(str(s) for s in sizes)}"] if sizes else []
    node = 1
    for b in range(count):
        size = base + (draw(st.integers(0, 1)) if b else 0)  # block 0 sets the base size
        lines.append(f"BlockName=b{b} Nodes=n[{node}-{node + size - 1}]")
        node += size
    return conf("\n".join(lines))


@st.composite
def situations(
    draw: st.DrawFn, topologies: st.SearchStrategy[Topology]
) -> tuple[Topology, ClusterState, PlacementRequest]:
    topo = draw(topologies)
    names = list(topo.node_names)
    free = [n for n in names if draw(st.booleans()) or draw(st.booleans())]
    unhealthy = [n for n in names if draw(st.integers(0, 5)) == 0]
    total = draw(st.integers(1, max(1, len(free))))
    spares = draw(st.integers(0, total - 1))
    nodes = total - spares
    gpus = draw(st.sampled_from([0, 1, 2, 4]))
    ranks = nodes * max(1, gpus)
    pp = draw(st.sampled_from([p for p in range(1, ranks + 1) if ranks % p == 0]))
    request = PlacementRequest(
        nodes=nodes, spares=spares, pp=pp, dp=ranks // pp, gpus_per_node=gpus
    )
    request.validate()
    return topo, ClusterState.of(free, unhealthy), request


def check_common(
    topo: Topology, state: ClusterState, request: PlacementRequest, plan: Placement
) -> list[int]:
    chosen = [topo.node_ids[n] for n in plan.node_names]
    assert len(chosen) == len(set(chosen)) == request.total_nodes
    assert state.free is not None
    assert set(plan.node_names) <= state.free
    assert not set(plan.node_names) & state.unhealthy
    spanned = {topo.switch_names[int(topo.node_leaf[n])] for n in chosen}
    assert spanned == set(plan.spanned)
    # rank order: rank = replica * pp + stage, ranks_per_node per node, then the spares
    active = [r for r in plan.roles if not r.spare]
    assert len(active) == request.nodes
    assert sum(r.spare for r in plan.roles) == request.spares
    assert all(len(r.slots) == request.ranks_per_node for r in active)
    slots = [slot for r in active for slot in r.slots]
    assert slots == [(rep, st) for rep in range(request.dp) for st in range(request.pp)]
    options = dict(o.split("=", 1) for o in plan.slurm_options)
    assert options["--nodes"] == str(request.total_nodes)
    assert set(hostlists.expand(options["--nodelist"])) == set(plan.node_names)
    if state.unhealthy:
        assert set(hostlists.expand(options["--exclude"])) == set(state.unhealthy)
    return chosen


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(situations(random_trees()))
def test_tree_placement_is_valid_and_optimal(
    case: tuple[Topology, ClusterState, PlacementRequest],
) -> None:
    topo, state, request = case
    avail = [int(n) for n in np.flatnonzero(state.available(topo))]
    optimum = brute_force_tree(topo, avail, request.total_nodes)
    if optimum is None:
        with pytest.raises(GantryError):
            plan_placement(topo, request, state, V2205)
        return
    plan = plan_placement(topo, request, state, V2205)
    chosen = check_common(topo, state, request, plan)
    common = topo.lowest_common_switch(chosen)
    assert common is not None, "spans switches without a common parent"
    assert len(plan.spanned) == optimum[0] == plan.lower_bound
    assert int(topo.switch_level[common]) == optimum[1]
    assert topo.switch_names[common] == plan.domain
    assert f"--switches={optimum[0]}@10:00" in plan.slurm_options


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(situations(random_blocks()))
def test_block_placement_is_valid_and_optimal(
    case: tuple[Topology, ClusterState, PlacementRequest],
) -> None:
    topo, state, request = case
    avail = [int(n) for n in np.flatnonzero(state.available(topo))]
    optimum = brute_force_block(topo, avail, request.total_nodes)
    if optimum is None:
        with pytest.raises(GantryError):
            plan_placement(topo, request, state, V2311)
    else:
        plan = plan_placement(topo, request, state, V2311)
        check_common(topo, state, request, plan)
        assert len(plan.spanned) == optimum
        assert plan.segment is None
        assert not any(o.startswith(("--switches", "--segment")) for o in plan.slurm_options)
    # With --segment (24.11) a placement exists whenever enough nodes are free.
    if len(avail) < request.total_nodes:
        with pytest.raises(GantryError):
            plan_placement(topo, request, state, V2411)
        return
    plan = plan_placement(topo, request, state, V2411)
    check_common(topo, state, request, plan)
    if plan.segment is not None:
        assert optimum is None
        assert request.total_nodes % plan.segment == 0
        assert f"--segment={plan.segment}" in plan.slurm_options


def test_local_cluster_prefers_one_leaf_then_one_spine() -> None:
    topo = site_topology(load_site(DEFAULT_SITE))
    request = PlacementRequest(nodes=2, pp=2)
    state = ClusterState.of(["n1", "n3", "n4", "n5", "n7"])
    plan = plan_placement(topo, request, state, V2205)
    assert plan.node_names == ["n3", "n4"] and plan.spanned == ("leaf2",)
    three = plan_placement(topo, PlacementRequest(nodes=3, pp=3), state, V2205)
    assert set(three.spanned) == {"leaf1", "leaf2"} and three.domain == "spine1"
    assert [r.stages for r in three.roles] == [(0,), (1,), (2,)]


def test_replicas_are_packed_per_leaf_and_spares_take_the_odd_nodes() -> None:
    topo = conf(
        "".join(f"SwitchName=l{i} Nodes=n[{3 * i + 1}-{3 * i + 3}]\n" for i in range(4))
        + "SwitchName=top Switches=l[0-3]\n"
    )
    plan = plan_placement(
        topo, PlacementRequest(nodes=8, spares=4, pp=2, dp=4), ClusterState(), V2205
    )
    for replica in range(4):
        assert len({r.leaf for r in plan.roles if replica in r.replicas}) == 1
    assert sorted(r.node for r in plan.roles if r.spare) == ["n12", "n3", "n6", "n9"]


def test_eight_gpu_nodes_hold_whole_replicas_and_units_span_nodes() -> None:
    topo = conf("SwitchName=a Nodes=n[1-4]\nSwitchName=b Nodes=n[5-8]\nSwitchName=t Switches=a,b\n")
    two_per_node = plan_placement(
        topo, PlacementRequest(nodes=2, pp=4, dp=4, gpus_per_node=8), ClusterState(), V2205
    )
    assert [r.replicas for r in two_per_node.roles] == [(0, 1), (2, 3)]
    wide = plan_placement(
        topo,
        PlacementRequest(nodes=6, spares=1, pp=16, dp=3, gpus_per_node=8),
        ClusterState.of(["n1", "n2", "n3", "n5", "n6", "n7", "n8"]),
        V2205,
    )
    # replicas of 2 nodes: two on leaf b, one on leaf a; the odd node of a is the spare
    for replica in range(3):
        assert len({r.leaf for r in wide.roles if replica in r.replicas}) == 1
    assert [r.node for r in wide.roles if r.spare] == ["n3"]


def test_segments_need_slurm_2411() -> None:
    text = "BlockSizes=2,4\n" + "".join(
        f"BlockName=b{i} Nodes=n[{2 * i + 1}-{2 * i + 2}]\n" for i in range(4)
    )
    topo = conf(text)
    state = ClusterState.of(["n1", "n2", "n5", "n6"])  # 2 free in each group of 2 blocks
    with pytest.raises(GantryError, match="no --segment"):
        plan_placement(topo, PlacementRequest(nodes=4), state, V2311)
    plan = plan_placement(topo, PlacementRequest(nodes=4, dp=2), state, V2411)
    assert plan.segment == 2 and "--segment=2" in plan.slurm_options


def test_block_topology_needs_slurm_2311() -> None:
    topo = conf("BlockName=b1 Nodes=n[1-2]\n")
    with pytest.raises(GantryError, match=r"needs Slurm 23\.11"):
        plan_placement(topo, PlacementRequest(nodes=1), ClusterState(), V2205)


def test_unknown_state_nodes_are_rejected() -> None:
    topo = site_topology(load_site(DEFAULT_SITE))
    with pytest.raises(GantryError, match="free nodes: x1 is not in the topology"):
        plan_placement(topo, PlacementRequest(nodes=1), ClusterState.of(["x1"]), V2205)


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"nodes": 6, "dp": 4}, "dp: pp(1) * dp(4) = 4 ranks but nodes(6) x 1 ranks/node = 6"),
        ({"nodes": 2, "dp": 2, "pp": 2, "gpus_per_node": 8}, "dp: pp(2) * dp(2) = 4 ranks but"),
        ({"nodes": 0}, "nodes: 0 is not allowed"),
        ({"nodes": 1, "switch_wait": "soon"}, "switch_wait: 'soon' is not allowed"),
    ],
)
def test_request_errors_name_every_factor(fields: dict[str, object], message: str) -> None:
    from launcher.errors import UserInputError
    from launcher.typed_config import from_mapping

    with pytest.raises(UserInputError, match=re.escape(message)):
        from_mapping(PlacementRequest, fields, "job.yaml")
