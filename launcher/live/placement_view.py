"""The placement tree, drawn one way for `gantry plan` and the live view: the planned nodes
under their switches (from the domain switch down), each with its replica/stage role
(``NodeRole.label``) and, in the live view once the gate decided, its outcome."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping

from rich.tree import Tree

from launcher.placement_record import PlacementRecord
from topology.model import Topology
from topology.placement import NodeRole


def node_label(role: NodeRole, outcome: str | None = None) -> str:
    """``n1  replica 0 · stage 1``, with ``  ✓ runs`` (· spare, ✗ otherwise) once known."""
    label = f"{role.node}  {role.label()}"
    if outcome is None:
        return label
    mark = "✓" if outcome.startswith("runs") else ("·" if outcome.startswith("spare") else "✗")
    return f"{label}  {mark} {outcome}"


def switch_tree(top: Tree, topology: Topology, domain: str, roles: Iterable[NodeRole],
                node_text: Callable[[NodeRole], str] = node_label,
                switch_label: Callable[[str], str] = str) -> None:
    """Under ``top`` (the branch of switch ``domain``, or the root when there is none): the
    leaves of ``roles`` in topology order (depth first), each under its chain of switches
    below the domain, with its nodes in topology order."""
    by_leaf: dict[str, dict[str, NodeRole]] = {}
    for role in roles:
        by_leaf.setdefault(role.leaf, {})[role.node] = role
    position = {int(s): i for i, s in enumerate(topology.leaf_order)}
    branches: dict[str, Tree] = {domain: top} if domain else {}
    for leaf in sorted(by_leaf, key=lambda name: position[topology.switch_ids[name]]):
        switch = topology.switch_ids[leaf]
        chain = [topology.switch_names[s] for s in topology.ancestors(switch)]
        if domain in chain:
            chain = chain[: chain.index(domain)]
        parent = top
        for name in reversed(chain):
            if name not in branches:
                branches[name] = parent.add(switch_label(name))
            parent = branches[name]
        members = [topology.node_names[n] for n in topology.leaf_nodes[switch]]
        for node in members:
            if node in by_leaf[leaf]:
                parent.add(node_text(by_leaf[leaf][node]))


def placement_tree(topology: Topology | None, placement: PlacementRecord,
                   outcomes: Mapping[str, str] | None = None) -> Tree:
    """A rich Tree (prints as indented text when piped); a one-line tree without roles.
    With ``outcomes`` (after the gate) each node says what became of it."""
    title = "placement after the gate" if outcomes else "placement"
    shown = outcomes or {}
    root = Tree(f"{title}: {placement.summary}")
    if not placement.roles:
        return root
    leaves = list(dict.fromkeys(r.leaf for r in placement.roles))
    if topology is None or any(leaf not in topology.switch_ids for leaf in leaves):
        for role in placement.roles:
            root.add(node_label(role, shown.get(role.node)))
        return root
    domain = placement.domain
    top = root.add(domain) if domain in topology.switch_ids else root
    switch_tree(top, topology, domain, placement.roles,
                lambda role: node_label(role, shown.get(role.node)))
    return root
