"""Rank order: which chosen node runs which stage of which pipeline replica, and the spares.

Replicas are cut from the chosen nodes in depth-first order, so each lies inside the smallest
subtree the allocation allows. When a replica fits on one leaf switch (base block), whole
replicas are packed per leaf first and the odd nodes left over become spares; this keeps
every replica on one leaf and puts stage s of every replica at the same offset, so data-
parallel groups line up with leaves. When a replica is larger than a leaf, spares are taken
from the leaves with the fewest chosen nodes so that replicas start on leaf boundaries.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import groupby

from topology.model import Topology
from topology.placement.request import PlacementRequest


@dataclass(frozen=True)
class NodeRole:
    """One chosen node and what it runs."""

    node: str
    """Node name."""
    leaf: str
    """Its leaf switch (tree) or base block (block)."""
    replica: int | None
    """Pipeline replica (data-parallel index) it belongs to; None for a spare."""
    stages: tuple[int, ...]
    """Pipeline stages it runs (several when a replica has fewer nodes than stages)."""

    @property
    def spare(self) -> bool:
        return self.replica is None


def assign_ranks(
    topology: Topology, nodes: tuple[int, ...], request: PlacementRequest
) -> tuple[NodeRole, ...]:
    """Roles for ``nodes`` (depth-first): replicas in rank order, then the spares."""
    per = request.replica_nodes
    runs = [list(run) for _, run in groupby(nodes, key=lambda n: int(topology.node_leaf[n]))]
    replicas: list[list[int]] = []
    spares: list[int] = []
    if per <= max(len(r) for r in runs):
        pool: list[int] = []
        for run in runs:
            whole = len(run) // per
            for index in range(whole):
                if len(replicas) < request.dp:
                    replicas.append(run[index * per : (index + 1) * per])
                else:
                    pool.extend(run[index * per : (index + 1) * per])
            pool.extend(run[whole * per :])
        position = {n: i for i, n in enumerate(nodes)}
        pool.sort(key=position.__getitem__)
        while len(replicas) < request.dp:
            replicas.append(pool[:per])
            pool = pool[per:]
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
        replicas = [active[i * per : (i + 1) * per] for i in range(request.dp)]
    roles: list[NodeRole] = []
    for replica, members in enumerate(replicas):
        for offset, node in enumerate(members):
            roles.append(
                NodeRole(
                    node=topology.node_names[node],
                    leaf=topology.switch_names[int(topology.node_leaf[node])],
                    replica=replica,
                    stages=_stages(offset, per, request.pp),
                )
            )
    for node in spares:
        roles.append(
            NodeRole(
                node=topology.node_names[node],
                leaf=topology.switch_names[int(topology.node_leaf[node])],
                replica=None,
                stages=(),
            )
        )
    return tuple(roles)


def _stages(offset: int, per: int, pp: int) -> tuple[int, ...]:
    if per >= pp:
        return (offset // (per // pp),)
    many = pp // per
    return tuple(range(offset * many, (offset + 1) * many))
