"""The gate's node choice when the job was placed by plan: keep the planned rank nodes that
passed preflight, fill the places of the others from healthy spares.

``gantry submit`` writes the placement to ``<job dir>/placement.json`` (its rank nodes in rank
order, then its spares: launcher/placement_record.py). Fill nodes are taken from the planned
spares first (plan order), then from any other healthy allocated node (allocation order: a
requeued job may get nodes the plan never named). The chosen nodes are returned in allocation
order, the order in which srun (and mpirun given that host order) numbers the ranks; the
trainer's rank-order file then gives each fill node the place of a replaced planned node,
pairing them in exactly that order (see ``launcher.train.layout.order_from_nodes``), and so
do :func:`places_taken` (which the live view uses too) and :func:`choose_nodes`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from launcher.placement_record import read_placement_record


@dataclass(frozen=True)
class NodePlan:
    """The nodes the placement planned for a job."""

    rank_nodes: tuple[str, ...]
    """Nodes that run ranks, in rank order."""
    spare_nodes: tuple[str, ...] = ()
    """Planned spares, in plan order."""


@dataclass(frozen=True)
class PlannedChoice:
    """The nodes to run on, following a plan."""

    nodes: list[str]
    """Chosen nodes, in allocation order."""
    replaced: list[tuple[str, str]]
    """(planned rank node that does not run, node that takes its place), in rank order."""


def read_node_plan(path: Path) -> NodePlan | None:
    """The planned nodes in placement.json ``path`` (read by launcher.placement_record); None
    when the placement planned no nodes (Slurm chose them: mode "slurm" or "none")."""
    record = read_placement_record(path)
    return NodePlan(record.rank_nodes, record.spare_nodes) if record.rank_nodes else None


def choose_nodes(allocated: Sequence[str], healthy: Sequence[str], need: int,
                 plan: NodePlan) -> PlannedChoice | None:
    """``need`` nodes from ``healthy`` (a subset of ``allocated``) following ``plan``; None
    when fewer than ``need`` are healthy."""
    if len(healthy) < need:
        return None
    ok = set(healthy)
    kept = [n for n in plan.rank_nodes if n in ok][:need]
    planned = set(plan.rank_nodes)
    candidates = [n for n in plan.spare_nodes if n in ok] + [
        n for n in allocated if n in ok and n not in planned and n not in plan.spare_nodes]
    fills = candidates[: need - len(kept)]
    position = {n: i for i, n in enumerate(allocated)}
    chosen = sorted([*kept, *fills], key=lambda n: position[n])
    return PlannedChoice(chosen, places_taken(plan.rank_nodes, chosen))


def places_taken(rank_nodes: Sequence[str], running: Sequence[str]) -> list[tuple[str, str]]:
    """(planned rank node that does not run, running node that plays its part), in rank
    order: the replaced places take the unplanned running nodes in ``running`` (world rank)
    order, as ``launcher.train.layout.order_from_nodes`` assigns them."""
    planned = set(rank_nodes)
    up = set(running)
    newcomers = [n for n in running if n not in planned]
    lost = [n for n in rank_nodes if n not in up]
    return list(zip(lost, newcomers, strict=False))
