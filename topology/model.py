"""The network topology model: a forest of switches (tree) or of aggregated blocks (block).

Both Slurm plugins are held in one shape so that placement has one algorithm:

    node -> leaf switch (level 0) -> upper switch (level 1) -> ... -> root (no parent)

For topology/block the base blocks are the level-0 "switches", the aggregated blocks that
BlockSizes defines are the upper levels, and one synthetic root ("*") joins them all (Slurm
spans the whole block topology when a job is larger than the largest block size).
A flat topology is one synthetic leaf ("*") holding every node.

Everything is held in integer arrays (node ids, switch ids) so that a 27,500-node site is
handled without per-node objects in hot loops. Leaves are also laid out in depth-first order
(`leaf_order`): every switch covers one contiguous slice of it (`span_lo`/`span_hi`), which
makes "the leaves under switch s" a slice.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

import numpy as np
import numpy.typing as npt

TopologyKind = Literal["tree", "block", "flat"]
IntArray = npt.NDArray[np.int32]

SYNTHETIC_ROOT = "*"
"""Name of the synthetic switch that joins all blocks (block) or holds all nodes (flat)."""


@dataclass(frozen=True, eq=False)
class Topology:
    """A parsed, validated topology (see the module docstring for the shape)."""

    kind: TopologyKind
    """Which Slurm plugin this topology is for: tree, block or flat."""
    source: str
    """Where it came from (a file name, "site config", "scontrol show topology")."""
    node_names: tuple[str, ...]
    """Every node the topology knows, in first-listed order; node id = index."""
    switch_names: tuple[str, ...]
    """Every switch (tree), base or aggregated block (block); switch id = index."""
    switch_parent: IntArray
    """[S] parent switch id, -1 for a root (a switch without parent)."""
    switch_level: IntArray
    """[S] 0 for leaf switches and base blocks, parent level = max child level + 1."""
    children: tuple[tuple[int, ...], ...]
    """[S] child switch ids in declaration order."""
    node_leaf: IntArray
    """[N] the leaf switch (base block) of each node, -1 when no leaf lists it."""
    leaf_nodes: tuple[tuple[int, ...], ...]
    """[S] node ids listed under each leaf (in listing order); empty for upper switches."""
    block_sizes: tuple[int, ...] = ()
    """block: node counts of the base block and of each aggregated level (BlockSizes)."""
    declared_switches: int = 0
    """Switches that came from the input (synthetic ones, e.g. the block root, come after)."""
    warnings: tuple[str, ...] = ()
    """What was odd in the input and how it was handled (as Slurm does), one line each."""

    def __post_init__(self) -> None:
        order, lo, hi = _depth_first_leaves(self.switch_parent, self.children, self.switch_level)
        object.__setattr__(self, "leaf_order", order)
        object.__setattr__(self, "span_lo", lo)
        object.__setattr__(self, "span_hi", hi)
        object.__setattr__(self, "node_ids", {n: i for i, n in enumerate(self.node_names)})
        object.__setattr__(self, "switch_ids", {n: i for i, n in enumerate(self.switch_names)})
        leaf_pos = np.full(len(self.switch_names), -1, dtype=np.int32)
        leaf_pos[order] = np.arange(len(order), dtype=np.int32)
        object.__setattr__(self, "leaf_position", leaf_pos)

    # Filled in by __post_init__.
    leaf_order: IntArray = field(init=False, repr=False)
    """[L] leaf switch ids in depth-first order (roots in declaration order)."""
    span_lo: IntArray = field(init=False, repr=False)
    """[S] first index into leaf_order of the leaves under each switch."""
    span_hi: IntArray = field(init=False, repr=False)
    """[S] one past the last index into leaf_order of the leaves under each switch."""
    leaf_position: IntArray = field(init=False, repr=False)
    """[S] index of each leaf in leaf_order, -1 for upper switches."""
    node_ids: dict[str, int] = field(init=False, repr=False)
    """Node name -> node id."""
    switch_ids: dict[str, int] = field(init=False, repr=False)
    """Switch name -> switch id."""

    # ---- sizes -----------------------------------------------------------------------------
    @property
    def node_count(self) -> int:
        return len(self.node_names)

    @property
    def switch_count(self) -> int:
        return len(self.switch_names)

    @property
    def depth(self) -> int:
        """Number of switch tiers (1 for a single level of leaf switches)."""
        return int(self.switch_level.max()) + 1 if self.switch_count else 0

    def is_leaf(self, switch: int) -> bool:
        return bool(self.leaf_position[switch] >= 0)

    def roots(self) -> list[int]:
        """Switches without a parent. More than one: Slurm never spans them (see issue 4)."""
        return [int(s) for s in np.flatnonzero(self.switch_parent < 0)]

    def root_of(self, switch: int) -> int:
        while self.switch_parent[switch] >= 0:
            switch = int(self.switch_parent[switch])
        return switch

    def leaves_under(self, switch: int) -> IntArray:
        """Leaf switch ids under ``switch`` (itself if it is a leaf), depth-first."""
        return self.leaf_order[self.span_lo[switch] : self.span_hi[switch]]

    def nodes_under(self, switch: int) -> list[int]:
        return [n for leaf in self.leaves_under(switch) for n in self.leaf_nodes[int(leaf)]]

    def unconnected_nodes(self) -> list[str]:
        return [self.node_names[i] for i in np.flatnonzero(self.node_leaf < 0)]

    # ---- relations between nodes -----------------------------------------------------------
    def ancestors(self, switch: int) -> list[int]:
        """``switch`` followed by its parent, grandparent, ... up to its root."""
        chain = [switch]
        while self.switch_parent[chain[-1]] >= 0:
            chain.append(int(self.switch_parent[chain[-1]]))
        return chain

    def lowest_common_switch(self, nodes: Sequence[int]) -> int | None:
        """The lowest switch above all ``nodes``; None if they have no common ancestor."""
        leaves = {int(self.node_leaf[n]) for n in nodes}
        if not leaves or -1 in leaves:
            return None
        first, *rest = leaves
        common = self.ancestors(first)
        for leaf in rest:
            on_path = set(self.ancestors(leaf))
            common = [s for s in common if s in on_path]
            if not common:
                return None
        return common[0]

    def tier(self, a: int, b: int) -> int | None:
        """Network distance between two nodes by tier.

        0: the same node; 1: the same leaf switch; k+1: lowest common switch at level k;
        None: no common switch (Slurm never places one job on both).
        """
        if a == b:
            return 0
        common = self.lowest_common_switch([a, b])
        if common is None:
            return None
        return int(self.switch_level[common]) + 1


def _depth_first_leaves(
    parent: IntArray, children: tuple[tuple[int, ...], ...], level: IntArray
) -> tuple[IntArray, IntArray, IntArray]:
    count = len(parent)
    lo = np.zeros(count, dtype=np.int32)
    hi = np.zeros(count, dtype=np.int32)
    order: list[int] = []
    for root in np.flatnonzero(parent < 0):
        # Iterative post-order walk: (switch, next child index).
        stack: list[tuple[int, int]] = [(int(root), 0)]
        lo[root] = len(order)
        while stack:
            switch, index = stack.pop()
            kids = children[switch]
            if index == 0:
                lo[switch] = len(order)
                if level[switch] == 0 and not kids:
                    order.append(switch)
            if index < len(kids):
                stack.append((switch, index + 1))
                child = kids[index]
                if parent[child] == switch:  # a child listed by two parents belongs to one
                    stack.append((child, 0))
                continue
            hi[switch] = len(order)
    return np.asarray(order, dtype=np.int32), lo, hi
