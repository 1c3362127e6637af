"""Human output of `gantry cluster status`: a rich tree on a terminal, indented plain text
when piped (no box-drawing characters, one fact per line, stable for grep)."""

from __future__ import annotations

from collections import Counter

from rich.console import Console
from rich.text import Text
from rich.tree import Tree

from launcher.cluster.status import ClusterStatus, TopologyGroup

_STATE_STYLE = {"idle": "green", "allocated": "yellow", "mixed": "yellow", "stopped": "dim"}


def summary_lines(status: ClusterStatus) -> list[str]:
    """The header: cluster, daemons, node state counts, config paths."""
    counts = Counter(n.state for n in status.nodes)
    states = ", ".join(f"{count} {state}" for state, count in sorted(counts.items()))
    running = sum(d.running for d in status.daemons)
    word = "up" if status.running else ("partly up" if running else "not running")
    gpus = f" ({status.gpus_per_node} emulated GPUs each)" if status.gpus_per_node else ""
    lines = [
        f"cluster {status.cluster_name}: {word} (Slurm {status.slurm_version}); "
        f"{len(status.nodes)} nodes{gpus}: {states}",
        f"daemons: {running}/{len(status.daemons)} running",
        f"run dir: {status.run_dir}",
        f"slurm.conf: {status.slurm_conf}",
    ]
    for daemon in status.daemons:
        if not daemon.running and running:
            lines.append(f"not running: {daemon.name} (see {daemon.log})")
    return lines


def _node_label(status: ClusterStatus, name: str) -> tuple[str, str]:
    node = next((n for n in status.nodes if n.name == name), None)
    state = node.state if node else "unknown"
    return name, state


def _plain_tree(status: ClusterStatus, group: TopologyGroup, depth: int, out: list[str]) -> None:
    out.append("  " * depth + group.name)
    for child in group.children:
        _plain_tree(status, child, depth + 1, out)
    for node in group.nodes:
        name, state = _node_label(status, node)
        out.append("  " * (depth + 1) + f"{name} {state}")


def _rich_tree(status: ClusterStatus, group: TopologyGroup, tree: Tree) -> None:
    branch = tree.add(Text(group.name, style="bold"))
    for child in group.children:
        _rich_tree(status, child, branch)
    for node in group.nodes:
        name, state = _node_label(status, node)
        style = _STATE_STYLE.get(state.rstrip("*~#"), "red")
        branch.add(Text.assemble(f"{name} ", (state, style)))


def show(status: ClusterStatus, console: Console) -> None:
    """Print the status: header, then the switch tree / blocks / node list."""
    for line in summary_lines(status):
        console.print(line, markup=False)
    title = {"tree": "switch tree", "block": "blocks"}.get(status.topology_plugin, "nodes")
    if not status.topology:
        console.print(f"{title}:", markup=False)
        for node in status.nodes:
            console.print(f"  {node.name} {node.state}", markup=False)
        return
    if console.is_terminal:
        tree = Tree(Text(title, style="bold"))
        for root in status.topology:
            _rich_tree(status, root, tree)
        console.print(tree)
        return
    lines = [f"{title}:"]
    for root in status.topology:
        _plain_tree(status, root, 1, lines)
    for line in lines:
        console.print(line, markup=False)
