"""Which spare takes a failed node's place: the healthy one nearest it in the network.

Candidates are the allocated nodes that run no rank, are not faulty in this job and that
Slurm reports usable. They are tried nearest first: the same leaf switch (block) as a lost
node, then the next tier up (``Topology.tier``), then the placement's planned spare order,
then allocation order.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from launcher.preflight.drain_policy import NodeState
from topology.model import Topology

_UNUSABLE = ("DOWN", "DRAIN", "DRAINED", "DRAINING", "FAIL", "NOT_RESPONDING",
             "POWER_DOWN", "POWERED_DOWN", "REBOOT", "MAINT")


def usable(state: NodeState | None) -> bool:
    """Slurm lets new work start on the node (no drain, not down, not failing)."""
    if state is None:
        return False
    flags = set(state.state.upper().replace("*", "+NOT_RESPONDING").split("+"))
    return not flags & set(_UNUSABLE)


def candidates(allocation: Sequence[str], running: Sequence[str], faulty: Sequence[str],
               states: Mapping[str, NodeState]) -> list[str]:
    """Allocated nodes that could take a place, in allocation order."""
    skip = set(running) | set(faulty)
    return [n for n in allocation if n not in skip and usable(states.get(n))]


def nearest_first(pool: Sequence[str], lost: Sequence[str], topology: Topology | None,
                  planned_spares: Sequence[str] = ()) -> list[str]:
    """``pool`` ordered nearest to any of ``lost`` first (see the module docstring)."""
    plan_rank = {n: i for i, n in enumerate(planned_spares)}
    position = {n: i for i, n in enumerate(pool)}

    def distance(node: str) -> int:
        if topology is None or node not in topology.node_ids:
            return 1 << 20
        tiers = [topology.tier(topology.node_ids[node], topology.node_ids[gone])
                 for gone in lost if gone in topology.node_ids]
        known = [t for t in tiers if t is not None]
        return min(known) if known else 1 << 20

    return sorted(pool, key=lambda n: (distance(n), plan_rank.get(n, len(plan_rank)),
                                       position[n]))
