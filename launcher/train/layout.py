"""Rank layout: which (replica, pipeline rank) each MPI world rank plays, and its node group.

Default order: world ranks in node order, replica-major (ranks r*pp .. r*pp+pp-1 form
replica r, so pipeline neighbours sit on neighbouring ranks). A rank-order file from the
placement (a YAML/JSON list of world ranks, in layout order) overrides it. The node of a rank
is SLURMD_NODENAME (or GANTRY_NODE_NAME, else the host name): on the embedded cluster all
"nodes" share one host, so shared-memory grouping would be wrong.
"""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass
from pathlib import Path

import yaml

from launcher.errors import UserInputError


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


def read_rank_order(path: Path, world: int) -> list[int]:
    """The layout-order list of world ranks in ``path`` (a permutation of 0..world-1)."""
    try:
        order = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as err:
        raise UserInputError(f"{path}: cannot read rank order ({err})") from None
    if not isinstance(order, list) or not all(type(r) is int for r in order):
        raise UserInputError(f"{path}: expected a list of integer world ranks")
    if sorted(order) != list(range(world)):
        raise UserInputError(
            f"{path}: {order!r} is not allowed (expected each world rank 0..{world - 1} once)"
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
