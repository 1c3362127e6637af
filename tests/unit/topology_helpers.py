"""Shared helpers for the topology tests: build topologies from text, brute-force optima."""

from __future__ import annotations

from itertools import combinations

from topology.build import build_topology
from topology.conf_format import parse_topology_conf
from topology.model import Topology


def conf(text: str, known: list[str] | None = None, source: str = "t.conf") -> Topology:
    return build_topology(parse_topology_conf(text, source), known)


def brute_force_tree(topology: Topology, avail: list[int], total: int) -> tuple[int, int] | None:
    """(fewest leaves, lowest common-switch level among those) over every valid subset."""
    best: tuple[int, int] | None = None
    for subset in combinations(avail, total):
        common = topology.lowest_common_switch(subset)
        if common is None:
            continue
        key = (
            len({int(topology.node_leaf[n]) for n in subset}),
            int(topology.switch_level[common]),
        )
        if best is None or key < best:
            best = key
    return best


def brute_force_block(topology: Topology, avail: list[int], total: int) -> int | None:
    """Fewest base blocks over subsets inside one aligned group of Slurm's level for total."""
    sizes = topology.block_sizes
    level = next((i for i, s in enumerate(sizes) if s >= total), len(sizes))
    span = sizes[level] // sizes[0] if level < len(sizes) else topology.declared_switches
    best: int | None = None
    for subset in combinations(avail, total):
        blocks = {int(topology.node_leaf[n]) for n in subset}
        if len({b // span for b in blocks}) != 1:
            continue
        if best is None or len(blocks) < best:
            best = len(blocks)
    return best
