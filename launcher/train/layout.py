"""Rank layout: which (replica, pipeline rank) each MPI world rank plays, and its node group.

Default order: world ranks in node order, replica-major (ranks r*pp .. r*pp+pp-1 form
replica r, so pipeline neighbours sit on neighbouring ranks). A rank-order file overrides
it: a YAML/JSON list of world ranks in layout order, or of node names in layout order (the
placement's, written by `gantry submit`; spares that replaced planned nodes take their
place). The node of a rank is SLURMD_NODENAME (or GANTRY_NODE_NAME, else the host name):
on the embedded cluster all "nodes" share one host, so shared-memory grouping would be wrong.
"""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass
from pathlib import Path

from launcher.errors import UserInputError, brief
from launcher.typed_config import MAX_CONFIG_BYTES, load_yaml_file
from topology.user_files import require_regular_file


@dataclass(frozen=True)
class RankLayout:
    """This rank's place in the pp x dp grid."""

    world_rank: int
    """MPI world rank."""
    pp: int
    """Pipeline ranks per replica."""
    dp: int
    """Replicas."""
    replica: int
    """Data-parallel index d."""
    pipe_rank: int
    """Pipeline position p."""


def node_name() -> str:
    return os.environ.get("SLURMD_NODENAME") or os.environ.get("GANTRY_NODE_NAME") or (
        socket.gethostname()
    )


def read_rank_order(path: Path, world: int, rank_nodes: list[str] | None = None) -> list[int]:
    """The layout-order list of world ranks in ``path`` (a permutation of 0..world-1).

    The file holds either world ranks in layout order, or node names in layout order (what
    `gantry submit` writes from the placement): each node's ranks, in world-rank order, take
    consecutive layout positions; ``rank_nodes`` (the node of each world rank) resolves them
    (see :func:`order_from_nodes`).
    """
    require_regular_file(path, "a rank order file (YAML list)", MAX_CONFIG_BYTES)
    order = load_yaml_file(path)  # UTF-8, bounded nesting; one UserInputError naming path
    if (isinstance(order, list) and order and all(type(r) is str for r in order)
            and rank_nodes is not None):
        return order_from_nodes(order, rank_nodes, str(path))
    if not isinstance(order, list) or not all(type(r) is int for r in order):
        raise UserInputError(f"{path}: expected a list of integer world ranks or node names")
    if sorted(order) != list(range(world)):
        raise UserInputError(
            f"{path}: {brief(order)} is not allowed (expected each world rank 0..{world - 1} "
            "once)"
        )
    return list(order)


def make_layout(world_rank: int, world: int, pp: int, dp: int,
                order: list[int] | None = None) -> RankLayout:
    if pp * dp != world:
        raise UserInputError(
            f"parallelism: pp({pp}) * dp({dp}) = {pp * dp} ranks but {world} MPI ranks started"
        )
    position = order.index(world_rank) if order is not None else world_rank
    return RankLayout(world_rank, pp, dp, position // pp, position % pp)


def order_from_nodes(planned: list[str], rank_nodes: list[str], where: str) -> list[int]:
    """World ranks in layout order from planned node names (layout order) and the node of
    each world rank. A planned node the job does not run on (preflight replaced it) is
    played by a node the plan did not name (a spare), in the order those first appear."""
    running = list(dict.fromkeys(rank_nodes))
    ranks_of = {node: [w for w, n in enumerate(rank_nodes) if n == node] for node in running}
    per_node = {len(ranks) for ranks in ranks_of.values()}
    if len(per_node) != 1:
        raise UserInputError(f"{where}: ranks per node differ ({sorted(per_node)}); a node "
                             "rank order needs the same number of ranks on every node")
    if len(set(planned)) != len(planned) or len(planned) != len(running):
        raise UserInputError(
            f"{where}: {len(planned)} planned nodes ({', '.join(map(brief, planned[:8]))}) but "
            f"the job runs on {len(running)} ({', '.join(map(brief, running[:8]))}); expected "
            "each node once")
    newcomers = [n for n in running if n not in planned]
    final = [node if node in ranks_of else newcomers.pop(0) for node in planned]
    return [w for node in final for w in ranks_of[node]]
