"""Placement: choose the nodes of a pipeline-parallel job, its rank order and Slurm options.

``plan_placement`` is a pure function: topology + request + cluster state + Slurm version in,
a :class:`Placement` out (or a TopologyError saying why no placement exists).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from topology.errors import TopologyError
from topology.model import Topology
from topology.placement.ranks import NodeRole, assign_ranks
from topology.placement.request import SEGMENT_SINCE, ClusterState, PlacementRequest
from topology.placement.select import Selection, select_block, select_tree
from topology.placement.slurm_options import check_version, slurm_options
from topology.slurm_version import SlurmVersion

__all__ = [
    "ClusterState",
    "NodeRole",
    "Placement",
    "PlacementRequest",
    "SlurmVersion",
    "plan_placement",
]


@dataclass(frozen=True)
class Placement:
    """A planned allocation and why it was chosen."""

    request: PlacementRequest
    """What was asked for."""
    topology_kind: str
    """tree, block or flat."""
    unit: str
    """What `spanned` counts: "leaf switches" or "blocks" (or "" for flat)."""
    domain: str
    """Switch or block group holding every chosen node ("*" = the whole block topology)."""
    roles: tuple[NodeRole, ...]
    """Chosen nodes in rank order (replica by replica, stage by stage), then the spares."""
    spanned: tuple[str, ...]
    """Leaf switches / base blocks the allocation uses, depth-first."""
    lower_bound: int
    """Fewest leaf switches / blocks any allocation could span with the current free nodes."""
    idle_lower_bound: int
    """Fewest leaf switches / blocks the job could span on an idle cluster."""
    segment: int | None
    """block: nodes per --segment when the job is split, else None."""
    slurm_options: tuple[str, ...]
    """sbatch/salloc options that obtain exactly this allocation."""
    explanation: tuple[str, ...]
    """Why these nodes, one sentence each."""
    warnings: tuple[str, ...]
    """Topology warnings (how odd input was handled)."""

    @property
    def node_names(self) -> list[str]:
        return [r.node for r in self.roles]

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["roles"] = [
            {
                "node": r.node,
                "leaf": r.leaf,
                "spare": r.spare,
                "ranks": [{"replica": rep, "stage": st} for rep, st in r.slots],
            }
            for r in self.roles
        ]
        return data


def plan_placement(
    topology: Topology,
    request: PlacementRequest,
    state: ClusterState,
    slurm_version: SlurmVersion,
) -> Placement:
    """Choose nodes for ``request`` on ``topology`` given ``state`` (see the package doc)."""
    check_version(topology, slurm_version)
    avail = state.available(topology)
    total = request.total_nodes
    if int(avail.sum()) < total:
        raise TopologyError(
            f"the job needs {total} nodes ({request.nodes} + {request.spares} spares) but only "
            f"{int(avail.sum())} are free, healthy and in the topology"
        )
    if topology.kind == "block":
        selection = select_block(
            topology, avail, total, slurm_version >= SEGMENT_SINCE, request.unit_nodes
        )
    else:
        selection = select_tree(topology, avail, total)
    roles = assign_ranks(topology, selection.nodes, request)
    unit = {"tree": "leaf switches", "block": "blocks", "flat": ""}[topology.kind]
    options = slurm_options(topology, selection, request, slurm_version, state.unhealthy)
    return Placement(
        request=request,
        topology_kind=topology.kind,
        unit=unit,
        domain=selection.domain,
        roles=roles,
        spanned=tuple(topology.switch_names[s] for s in selection.leaves),
        lower_bound=selection.lower_bound,
        idle_lower_bound=selection.idle_lower_bound,
        segment=selection.segment,
        slurm_options=options,
        explanation=_explain(topology, selection, roles, request, unit),
        warnings=topology.warnings,
    )


def _explain(
    topology: Topology,
    selection: Selection,
    roles: tuple[NodeRole, ...],
    request: PlacementRequest,
    unit: str,
) -> tuple[str, ...]:
    lines: list[str] = []
    total = request.total_nodes
    span = len(selection.leaves)
    if topology.kind == "flat":
        lines.append(f"flat topology: any {total} free healthy nodes are equivalent")
    else:
        verdict = (
            "the fewest possible with the free nodes"
            if span == selection.lower_bound
            else f"the fewest possible ignoring Slurm's block alignment is {selection.lower_bound}"
        )
        lines.append(
            f"{total} nodes ({request.nodes} + {request.spares} spares) span {span} {unit}: "
            f"{verdict}; on an idle cluster {selection.idle_lower_bound}"
        )
        if topology.kind == "tree":
            lines.append(
                f"all under {selection.domain} (level {selection.domain_level}), the lowest "
                f"switch that holds them with {span} {unit}; Slurm never spans switches "
                "without a common parent"
            )
        elif selection.segment is None:
            lines.append(
                f"all inside block group {selection.domain}: Slurm keeps a {total}-node job in "
                "one aligned group of the smallest BlockSizes level that holds it"
            )
        else:
            lines.append(
                f"no single block group had room: the job is split into segments of "
                f"{selection.segment} nodes (--segment), each inside one block group"
            )
    by_replica: dict[int, set[str]] = {}
    for role in roles:
        for replica in role.replicas:
            by_replica.setdefault(replica, set()).add(role.leaf)
    single = sum(1 for leaves in by_replica.values() if len(leaves) == 1)
    if topology.kind != "flat":
        lines.append(
            f"{request.dp} pipeline replicas of pp={request.pp} ranks "
            f"({request.ranks_per_node} ranks/node): {single} sit on one "
            f"{'leaf switch' if topology.kind == 'tree' else 'block'}, the rest span the fewest "
            f"{unit} in depth-first order"
        )
    spares = [r.node for r in roles if r.spare]
    if spares:
        lines.append(f"spares: {', '.join(spares[:8])}{' ...' if len(spares) > 8 else ''}")
    return tuple(lines)
