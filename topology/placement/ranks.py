"""Rank order: which chosen node runs which (replica, stage) ranks, and which are spares.

Ranks follow the job spec's layout: pp x dp ranks, ``ranks_per_node`` (GPUs) per node,
rank = replica * pp + stage, node i of the rank order runs ranks [i*g, (i+1)*g). Nodes are
cut from the chosen nodes in depth-first order in *units* (the fewest whole nodes holding
whole replicas, see ``PlacementRequest.unit_nodes``), so each replica lies inside the smallest
subtree the allocation allows. When a unit fits on one leaf switch (base block), whole units
are packed per leaf first and the odd nodes left over become spares: every replica stays on
one leaf and stage s of every replica sits at the same offset, so data-parallel groups line
up with leaves. When a unit is larger than a leaf, spares are taken from the leaves with the
fewest chosen nodes so that units start on leaf boundaries.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import groupby

from topology.model import Topology
from topology.placement.request import PlacementRequest


@dataclass(frozen=True)
class NodeRole:
    """One chosen node and the ranks it runs."""

    node: str
    """Node name."""
    leaf: str
    """Its leaf switch (tree) or base block (block)."""
    slots: tuple[tuple[int, int], ...]
    """(replica, stage) of each rank on the node, in local-rank order; empty for a spare."""

    @property
    def spare(self) -> bool:
        return not self.slots

    @property
    def replicas(self) -> tuple[int, ...]:
        return tuple(sorted({r for r, _ in self.slots}))

    @property
    def stages(self) -> tuple[int, ...]:
        return tuple(sorted({s for _, s in self.slots}))

    def label(self) -> str:
        """"spare", the one rank's "replica 0 · stage 1", or each rank's "r0/s1" (a node with
        several ranks): the one wording of `gantry plan`, the live view and its table."""
        if self.spare:
            return "spare"
        if len(self.slots) == 1:
            replica, stage = self.slots[0]
            return f"replica {replica} · stage {stage}"
        return " ".join(f"r{r}/s{s}" for r, s in self.slots)


def assign_ranks(
    topology: Topology, nodes: tuple[int, ...], request: PlacementRequest
) -> tuple[NodeRole, ...]:
    """Roles for ``nodes`` (depth-first): the rank order, then the spares."""
    unit = request.unit_nodes
    units_needed = request.nodes // unit
    runs = [list(run) for _, run in groupby(nodes, key=lambda n: int(topology.node_leaf[n]))]
    units: list[list[int]] = []
    spares: list[int] = []
    if unit <= max(len(r) for r in runs):
        pool: list[int] = []
        for run in runs:
            whole = len(run) // unit
            for index in range(whole):
                piece = run[index * unit : (index + 1) * unit]
                if len(units) < units_needed:
                    units.append(piece)
                else:
                    pool.extend(piece)
            pool.extend(run[whole * unit :])
        position = {n: i for i, n in enumerate(nodes)}
        pool.sort(key=position.__getitem__)
        while len(units) < units_needed:
            units.append(pool[:unit])
            pool = pool[unit:]
        spares = pool
    else:
        by_size = sorted(range(len(runs)), key=lambda i: (len(runs[i]), -i))
        need = request.spares
        for index in by_size:
            if need == 0:
                break
            take = min(need, len(runs[index]))
            spares = runs[index][len(runs[index]) - take :] + spares
            runs[index] = runs[index][: len(runs[index]) - take]
            need -= take
        active = [n for run in runs for n in run]
        units = [active[i * unit : (i + 1) * unit] for i in range(units_needed)]
    per_node = request.ranks_per_node
    roles: list[NodeRole] = []
    for index, node in enumerate(n for piece in units for n in piece):
        ranks = range(index * per_node, (index + 1) * per_node)
        roles.append(
            NodeRole(
                node=topology.node_names[node],
                leaf=topology.switch_names[int(topology.node_leaf[node])],
                slots=tuple((rank // request.pp, rank % request.pp) for rank in ranks),
            )
        )
    for node in spares:
        roles.append(
            NodeRole(
                node=topology.node_names[node],
                leaf=topology.switch_names[int(topology.node_leaf[node])],
                slots=(),
            )
        )
    return tuple(roles)
