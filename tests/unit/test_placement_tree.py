"""`gantry plan` and the live view draw a placement with one drawer: below the domain switch
the same switches and the same node lines, whatever the layout."""

from __future__ import annotations

import io
import re
from pathlib import Path

import pytest
from rich.console import Console
from rich.tree import Tree

from launcher.commands.plan import build_tree
from launcher.live.placement_view import placement_tree
from launcher.placement_record import placement_record
from launcher.site_config import load_site
from launcher.site_topology import site_topology
from launcher.typed_config import from_mapping
from topology import hostlists
from topology.placement import ClusterState, PlacementRequest, SlurmVersion, plan_placement

REPO = Path(__file__).resolve().parents[2]


def text(tree: Tree) -> list[str]:
    out = io.StringIO()
    Console(file=out, width=200, color_system=None).print(tree)
    return out.getvalue().splitlines()


@pytest.mark.parametrize(("nodes", "spares", "pp", "gpus", "unhealthy"), [
    (4, 1, 2, 1, "n2"), (2, 1, 2, 2, ""), (3, 2, 3, 1, "n1"), (3, 1, 1, 1, "n4")])
def test_plan_and_live_view_draw_the_same_tree(nodes: int, spares: int, pp: int, gpus: int,
                                               unhealthy: str) -> None:
    topology = site_topology(load_site(REPO / "site_configs" / "local.yaml"))
    request = from_mapping(PlacementRequest, {
        "nodes": nodes, "spares": spares, "pp": pp, "dp": nodes * gpus // pp,
        "gpus_per_node": gpus}, "test")
    bad = set(hostlists.expand(unhealthy, "unhealthy")) if unhealthy else set()
    plan = plan_placement(topology, request, ClusterState.of(None, bad),
                          SlurmVersion.parse("22.05.8"))
    record = placement_record({"mode": "planned", "summary": "s", "plan": plan.to_json()}, "t")
    planned = text(build_tree(topology, plan))
    live = text(placement_tree(topology, record))
    assert live[:2] == ["placement: s", f"└── {plan.domain}"]
    # The plan's root is the domain (with its span) and its leaves count the chosen nodes.
    assert [re.sub(r"  \(\d+ of \d+ nodes\)$", "", line) for line in planned[1:]] == [
        line[4:] for line in live[2:]]
    assert any(re.search(r"  \(\d+ of \d+ nodes\)$", line) for line in planned)
    assert len(live) - 2 >= nodes + spares
