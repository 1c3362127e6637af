"""Synthetic large sites for tests and benchmarks: a 3-level fat tree and NVL72-style blocks.

Both default to 27,500 nodes x 8 GPUs (220,000 GPUs). Node names are ``gpu00001`` ...; the
text uses hostlist ranges so a whole site stays a few thousand short lines.

    python -m topology.synthetic fat-tree -o fat-tree.topology.conf
    python -m topology.synthetic nvl72 --format yaml -o nvl72.topology.yaml
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from topology.build import build_topology
from topology.conf_format import parse_topology_conf
from topology.yaml_format import write_topology_yaml

SITE_NODES = 27_500
"""Nodes of the large example site."""
GPUS_PER_NODE = 8
"""GPUs per node of the large example site."""
NVL72_NODES = 9
"""Nodes per NVL72 domain at 8 GPUs per node (72 GPUs)."""
NVL72_BLOCK_SIZES = (9, 36, 144, 576, 2304)
"""BlockSizes: 1, 4, 16, 64 and 256 NVL72 domains."""


def node_name(index: int, prefix: str = "gpu", width: int = 5) -> str:
    """Name of node ``index`` (1-based)."""
    return f"{prefix}{index:0{width}d}"


def _range(first: int, last: int, prefix: str, width: int) -> str:
    if first == last:
        return node_name(first, prefix, width)
    return f"{prefix}[{first:0{width}d}-{last:0{width}d}]"


def fat_tree_conf(
    nodes: int = SITE_NODES,
    nodes_per_leaf: int = 32,
    leaves_per_spine: int = 16,
    prefix: str = "gpu",
    width: int = 5,
) -> str:
    """topology.conf of a 3-level fat tree: leaves of ``nodes_per_leaf``, spines, one core.

    The last leaf and spine are short when the counts do not divide (as on real sites).
    """
    lines = [f"# Synthetic 3-level fat tree: {nodes} nodes, {nodes_per_leaf} per leaf switch"]
    leaves = (nodes + nodes_per_leaf - 1) // nodes_per_leaf
    for leaf in range(leaves):
        first = leaf * nodes_per_leaf + 1
        last = min(nodes, first + nodes_per_leaf - 1)
        lines.append(f"SwitchName=leaf{leaf + 1:04d} Nodes={_range(first, last, prefix, width)}")
    spines = (leaves + leaves_per_spine - 1) // leaves_per_spine
    for spine in range(spines):
        first = spine * leaves_per_spine + 1
        last = min(leaves, first + leaves_per_spine - 1)
        lines.append(f"SwitchName=spine{spine + 1:03d} Switches={_range(first, last, 'leaf', 4)}")
    lines.append(f"SwitchName=core Switches={_range(1, spines, 'spine', 3)}")
    return "\n".join(lines) + "\n"


def nvl72_conf(
    nodes: int = SITE_NODES,
    block_nodes: int = NVL72_NODES,
    block_sizes: Sequence[int] = NVL72_BLOCK_SIZES,
    prefix: str = "gpu",
    width: int = 5,
) -> str:
    """topology.conf of NVL72-style blocks (topology/block).

    Nodes left over after the last whole block stay outside every block, as service nodes
    would (Slurm warns that blocks lack access to them).
    """
    blocks = nodes // block_nodes
    lines = [
        f"# Synthetic NVL72-style blocks: {blocks} blocks of {block_nodes} nodes",
        f"BlockSizes={','.join(str(s) for s in block_sizes)}",
    ]
    for block in range(blocks):
        first = block * block_nodes + 1
        last = first + block_nodes - 1
        lines.append(f"BlockName=nvl{block + 1:04d} Nodes={_range(first, last, prefix, width)}")
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m topology.synthetic", description=__doc__)
    parser.add_argument("layout", choices=("fat-tree", "nvl72"))
    parser.add_argument("--nodes", type=int, default=SITE_NODES)
    parser.add_argument("--format", choices=("conf", "yaml"), default="conf")
    parser.add_argument("-o", "--output", type=Path, help="file to write (default: stdout)")
    args = parser.parse_args(argv)
    if args.nodes < 1:
        parser.error(f"--nodes {args.nodes} is not allowed (expected an integer >= 1)")
    text = fat_tree_conf(args.nodes) if args.layout == "fat-tree" else nvl72_conf(args.nodes)
    if args.format == "yaml":
        topology = build_topology(parse_topology_conf(text, f"synthetic {args.layout}"))
        text = write_topology_yaml(topology, name=args.layout)
    if args.output:
        args.output.write_text(text, encoding="utf-8")
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
