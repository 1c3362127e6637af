"""The placement tree with stage labels: planned nodes under their switches (from the domain
switch down), each with its replica/stage role and, once the gate decided, its outcome."""

from __future__ import annotations

from collections.abc import Mapping

from rich.tree import Tree

from launcher.placement_record import PlacementRecord
from topology.model import Topology


def _node_label(node: str, role: str, outcome: str | None) -> str:
    label = f"{node}  {role}"
    if outcome is None:
        return label
    mark = "✓" if outcome.startswith("runs") else ("·" if outcome.startswith("spare") else "✗")
    return f"{label}  {mark} {outcome}"


def placement_tree(topology: Topology | None, placement: PlacementRecord,
                   outcomes: Mapping[str, str] | None = None) -> Tree:
    """A rich Tree (prints as indented text when piped); a one-line tree without roles.
    With ``outcomes`` (after the gate) each node says what became of it."""
    title = "placement after the gate" if outcomes else "placement"
    outcomes = outcomes or {}
    root = Tree(f"{title}: {placement.summary}")
    if not placement.roles:
        return root
    leaves = list(dict.fromkeys(r.leaf for r in placement.roles))
    if topology is None or any(leaf not in topology.switch_ids for leaf in leaves):
        for role in placement.roles:
            root.add(_node_label(role.node, role.label(), outcomes.get(role.node)))
        return root
    domain = placement.domain
    branches: dict[str, Tree] = {}
    top = root.add(domain) if domain in topology.switch_ids else root
    if domain:
        branches[domain] = top
    for leaf in leaves:
        chain = [topology.switch_names[s] for s in topology.ancestors(topology.switch_ids[leaf])]
        if domain in chain:
            chain = chain[: chain.index(domain)]
        parent = top
        for name in reversed(chain):
            if name not in branches:
                branches[name] = parent.add(name)
            parent = branches[name]
        for role in (r for r in placement.roles if r.leaf == leaf):
            parent.add(_node_label(role.node, role.label(), outcomes.get(role.node)))
    return root
