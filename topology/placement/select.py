"""Choose which nodes a job gets: fewest leaf switches (tree) or base blocks (block).

Tree: every switch is a candidate domain; within a domain the fewest leaves that hold M free
nodes are its k largest free counts. The best domain has the smallest k (the optimum), then
the lowest level (smallest subtree), then the fewest free nodes (best fit, least
fragmentation). Domains are subtrees, so a job never spans switches without a common parent.

Block: Slurm puts a job of M nodes inside one aligned group of 2^l base blocks, the smallest
BlockSizes level that holds M nodes; gantry picks among those groups the same way. When no
group has room and the site's Slurm has --segment (24.11+), the job is split into equal
segments, each inside one group of its own (smaller) level.

All counting is on integer arrays: free nodes per leaf via bincount, leaves of a switch as a
slice of the depth-first leaf order.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from topology.errors import TopologyError
from topology.model import IntArray, Topology


@dataclass(frozen=True)
class Selection:
    """The chosen nodes and what they span."""

    domain: str
    """Switch (tree) or block group (block) that holds every chosen node."""
    domain_level: int
    """Its level (0 = a single leaf switch / base block)."""
    leaves: tuple[int, ...]
    """Leaf switch / base block ids used, depth-first."""
    nodes: tuple[int, ...]
    """Chosen node ids, depth-first (leaf by leaf, each in listing order)."""
    lower_bound: int
    """Fewest leaves/blocks any allocation of M nodes could span with these free nodes."""
    idle_lower_bound: int
    """Fewest leaves/blocks M nodes span on an idle cluster (every node free)."""
    segment: int | None = None
    """block: nodes per segment when the job is split (--segment), else None."""


def _fewest(counts: IntArray, need: int) -> int:
    """Fewest entries of ``counts`` whose sum reaches ``need`` (len+1 if impossible)."""
    if need <= 0:
        return 0
    ordered = np.sort(counts)[::-1]
    reach = np.cumsum(ordered)
    index = int(np.searchsorted(reach, need))
    return index + 1 if index < len(ordered) else len(counts) + 1


def _pick_leaves(counts: IntArray, need: int) -> list[int]:
    """Positions (into ``counts``) of the fewest entries reaching ``need``.

    The largest counts, ties in position order (keeps siblings together); the last one is
    the smallest count that still completes the need (best fit).
    """
    k = _fewest(counts, need)
    order = np.argsort(-counts, kind="stable")
    chosen = [int(p) for p in order[: k - 1]]
    rest = need - int(counts[chosen].sum()) if chosen else need
    taken = set(chosen)
    fits = [int(p) for p in order[k - 1 :] if counts[p] >= rest and int(p) not in taken]
    last = min(fits, key=lambda p: (int(counts[p]), p))
    return sorted([*chosen, last])


def _take_nodes(
    topology: Topology, leaves: list[int], avail: npt.NDArray[np.bool_], need: int
) -> list[int]:
    """Free nodes of ``leaves`` (depth-first), all of each leaf but the last as needed."""
    nodes: list[int] = []
    for leaf in leaves:
        free = [n for n in topology.leaf_nodes[leaf] if avail[n]]
        nodes.extend(free[: need - len(nodes)])
    return nodes


def _leaf_free(topology: Topology, avail: npt.NDArray[np.bool_]) -> IntArray:
    on_leaf = topology.node_leaf[avail]
    counts = np.bincount(on_leaf, minlength=topology.switch_count)
    return counts.astype(np.int32)


def select_tree(topology: Topology, avail: npt.NDArray[np.bool_], total: int) -> Selection:
    """Tree (and flat) selection; see the module docstring."""
    free = _leaf_free(topology, avail)[topology.leaf_order]
    sizes = np.bincount(
        topology.node_leaf[topology.node_leaf >= 0], minlength=topology.switch_count
    ).astype(np.int32)[topology.leaf_order]
    best = _best_domain(topology, free, total)
    idle = _best_domain(topology, sizes, total)
    if best is None:
        largest = _largest_domain(topology, free)
        raise TopologyError(
            f"no switch has {total} free healthy nodes under it (most: {largest}); "
            "Slurm never spans switches without a common parent"
        )
    k, switch = best
    lo = int(topology.span_lo[switch])
    positions = _pick_leaves(free[lo : topology.span_hi[switch]], total)
    leaves = [int(topology.leaf_order[lo + p]) for p in positions]
    return Selection(
        domain=topology.switch_names[switch],
        domain_level=int(topology.switch_level[switch]),
        leaves=tuple(leaves),
        nodes=tuple(_take_nodes(topology, leaves, avail, total)),
        lower_bound=k,
        idle_lower_bound=idle[0] if idle else k,
    )


def _largest_domain(topology: Topology, free: IntArray) -> int:
    prefix = np.concatenate([[0], np.cumsum(free, dtype=np.int64)])
    totals = prefix[topology.span_hi] - prefix[topology.span_lo]
    return int(totals.max()) if len(totals) else 0


def _best_domain(topology: Topology, free: IntArray, total: int) -> tuple[int, int] | None:
    """(k, switch) minimising (k, level, free nodes, position), or None if none holds M."""
    prefix = np.concatenate([[0], np.cumsum(free, dtype=np.int64)])
    totals = prefix[topology.span_hi] - prefix[topology.span_lo]
    candidates = np.flatnonzero(totals >= total)
    if len(candidates) == 0:
        return None
    best: tuple[int, int, int, int, int] | None = None
    for switch in candidates:
        lo, hi = int(topology.span_lo[switch]), int(topology.span_hi[switch])
        k = 1 if hi - lo == 1 else _fewest(free[lo:hi], total)
        key = (k, int(topology.switch_level[switch]), int(totals[switch]), lo, int(switch))
        if best is None or key < best:
            best = key
    assert best is not None
    return best[0], best[4]


# ---- block --------------------------------------------------------------------------------


def _group_level(topology: Topology, nodes: int) -> int:
    """Index into block_sizes of the level Slurm uses for ``nodes``; len() = whole topology."""
    for index, size in enumerate(topology.block_sizes):
        if size >= nodes:
            return index
    return len(topology.block_sizes)


def _group_span(topology: Topology, level: int) -> int:
    """Base blocks per group at ``level``."""
    if level >= len(topology.block_sizes):
        return topology.declared_switches
    return topology.block_sizes[level] // topology.block_sizes[0]


def _group_name(topology: Topology, level: int, first: int, span: int) -> str:
    for switch in range(topology.declared_switches, topology.switch_count):
        if topology.switch_level[switch] == level and topology.leaves_under(switch)[0] == first:
            return topology.switch_names[switch]
    if span == 1:
        return topology.switch_names[first]
    last = min(first + span, topology.declared_switches) - 1
    return f"{topology.switch_names[first]}..{topology.switch_names[last]}"


def _best_group(free: IntArray, span: int, need: int) -> tuple[int, int] | None:
    """(k, first block) of the aligned group of ``span`` blocks best for ``need`` nodes."""
    best: tuple[int, int, int] | None = None
    for first in range(0, len(free), span):
        counts = free[first : first + span]
        total = int(counts.sum())
        if total < need:
            continue
        key = (_fewest(counts, need), total, first)
        if best is None or key < best:
            best = key
    return None if best is None else (best[0], best[2])


def select_block(
    topology: Topology,
    avail: npt.NDArray[np.bool_],
    total: int,
    segments_allowed: bool,
    preferred_segment: int,
) -> Selection:
    """Block selection; see the module docstring."""
    blocks = topology.declared_switches
    free = _leaf_free(topology, avail)[:blocks]
    sizes = np.asarray([len(topology.leaf_nodes[b]) for b in range(blocks)], dtype=np.int32)
    lower = _fewest(free, total)
    idle = _fewest(sizes, total)
    if lower > blocks:
        raise TopologyError(
            f"only {int(free.sum())} free healthy nodes are in blocks; the job needs {total}"
        )
    level = _group_level(topology, total)
    span = _group_span(topology, level)
    best = _best_group(free, span, total)
    if best is not None:
        _, first = best
        positions = _pick_leaves(free[first : first + span], total)
        leaves = [first + p for p in positions]
        return Selection(
            domain=_group_name(topology, level, first, span),
            domain_level=level,
            leaves=tuple(leaves),
            nodes=tuple(_take_nodes(topology, leaves, avail, total)),
            lower_bound=lower,
            idle_lower_bound=idle,
        )
    size_text = (
        f"{topology.block_sizes[level]}-node" if level < len(topology.block_sizes) else "whole"
    )
    if not segments_allowed:
        raise TopologyError(
            f"no {size_text} block group has {total} free healthy nodes, and this Slurm has "
            "no --segment (24.11+) to split the job"
        )
    for segment in _segment_sizes(total, preferred_segment):
        chosen = _segments(topology, free, avail, total, segment)
        if chosen is not None:
            leaves, nodes = chosen
            return Selection(
                domain="*",
                domain_level=len(topology.block_sizes),
                leaves=tuple(leaves),
                nodes=tuple(nodes),
                lower_bound=lower,
                idle_lower_bound=idle,
                segment=segment,
            )
    raise TopologyError(f"the free healthy nodes cannot hold {total} nodes in equal segments")


def _segment_sizes(total: int, preferred: int) -> list[int]:
    """Divisors of ``total`` below it: multiples of ``preferred`` first, largest first."""
    divisors = [d for d in range(total - 1, 0, -1) if total % d == 0]
    return [d for d in divisors if d % preferred == 0] + [d for d in divisors if d % preferred]


def _segments(
    topology: Topology, free: IntArray, avail: npt.NDArray[np.bool_], total: int, segment: int
) -> tuple[list[int], list[int]] | None:
    level = _group_level(topology, segment)
    span = _group_span(topology, level)
    groups = []
    for first in range(0, len(free), span):
        capacity = int(free[first : first + span].sum()) // segment
        if capacity:
            groups.append((-capacity, first))
    groups.sort()
    if sum(-c for c, _ in groups) * segment < total:
        return None
    counts: dict[int, int] = {}
    placed = 0
    for neg_capacity, first in groups:
        counts[first] = min(-neg_capacity, (total - placed) // segment)
        placed += counts[first] * segment
        if placed == total:
            break
    leaves: list[int] = []
    nodes: list[int] = []
    for first in sorted(counts):  # depth-first, so each group's segments stay contiguous
        need = counts[first] * segment
        positions = _pick_leaves(free[first : first + span], need)
        group_leaves = [first + p for p in positions]
        leaves.extend(group_leaves)
        nodes.extend(_take_nodes(topology, group_leaves, avail, need))
    return leaves, nodes
