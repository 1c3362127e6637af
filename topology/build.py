"""Validate a topology declaration the way Slurm does and build the array model from it.

What Slurm refuses (slurmctld exits) is an error here, ``file:line: what is wrong``:
a switch or block defined twice, a switch with both Nodes= and Switches=, a child switch that
is not defined (or is the switch itself), a switch cycle, a block without nodes or with fewer
nodes than the base block size, a bad BlockSizes value, a switch name over 64 characters.

What Slurm accepts with a warning is accepted here with a warning that says what Slurm does:
- a node under two leaf switches: Slurm keeps it in both ("Multiple leaf switches contain
  nodes"); gantry places it under the first one listed;
- a switch listed as child of two switches: Slurm records the last one as its parent;
  gantry does too;
- a node in two blocks: Slurm keeps it in both silently; gantry uses the first;
- names that are not nodes of the site: Slurm drops them ("Invalid hostnames in switch
  configuration"); so does gantry;
- nodes on no switch / in no block: Slurm never allocates them under the topology;
- several top-level switches: Slurm never spans them ("no switch can reach all nodes")
  unless TopologyParam=TopoOptional and the job does not ask for --switches.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from topology import hostlists
from topology.document import BlockDecl, SwitchDecl, TopologyDoc
from topology.errors import TopologyInputError, shown
from topology.model import SYNTHETIC_ROOT, Topology

MAX_SWITCH_NAME = 64
"""Slurm's limit on a switch name (HOST_NAME_MAX)."""
DEFAULT_BLOCK_LEVELS = (0, 1, 2, 3, 4)
"""Without BlockSizes Slurm aggregates 1, 2, 4, 8 and 16 base blocks."""
MAX_BLOCK_LEVEL = 15
"""Largest power of two (in base blocks) BlockSizes may use."""


def build_topology(doc: TopologyDoc, known_nodes: Sequence[str] | None = None) -> Topology:
    """Validate ``doc`` and build the model; ``known_nodes`` are the site's nodes, if known."""
    if doc.kind == "flat":
        if known_nodes is None:
            raise TopologyInputError(f"{doc.source}: a flat topology needs the list of nodes")
        return flat_topology(known_nodes, doc.source)
    if doc.kind == "tree":
        return _TreeBuilder(doc, known_nodes).build()
    return _BlockBuilder(doc, known_nodes).build()


def flat_topology(nodes: Sequence[str], source: str = "flat") -> Topology:
    """No network hierarchy: one synthetic leaf holding every node."""
    return Topology(
        kind="flat",
        source=source,
        node_names=tuple(nodes),
        switch_names=(SYNTHETIC_ROOT,),
        switch_parent=np.full(1, -1, dtype=np.int32),
        switch_level=np.zeros(1, dtype=np.int32),
        children=((),),
        node_leaf=np.zeros(len(nodes), dtype=np.int32),
        leaf_nodes=(tuple(range(len(nodes))),),
        declared_switches=0,
    )


def _listing(names: Sequence[str]) -> str:
    """A short hostlist for messages."""
    text = hostlists.collect(names)
    return text if len(text) <= 200 else text[:200] + "..."


def _group_name(names: list[str]) -> str:
    """An aggregated block's name: its blocks as a hostlist, as Slurm names it."""
    try:
        return hostlists.collect(names)
    except TopologyInputError:  # names that are no hostlist (e.g. with brackets): list them
        return ",".join(names)


class _NodeTable:
    """Assigns node ids: the site's nodes first (in order), else first-listed order."""

    def __init__(self, known: Sequence[str] | None) -> None:
        self.known = known is not None
        self.names: list[str] = list(known or [])
        self.ids: dict[str, int] = {n: i for i, n in enumerate(self.names)}
        self.invalid: list[str] = []

    def resolve(self, names: list[str]) -> list[int]:
        out: list[int] = []
        for name in names:
            node = self.ids.get(name)
            if node is None:
                if self.known:
                    self.invalid.append(name)
                    continue
                node = len(self.names)
                self.names.append(name)
                self.ids[name] = node
            out.append(node)
        return out

    def invalid_warning(self, what: str) -> list[str]:
        if not self.invalid:
            return []
        return [
            f"{_listing(self.invalid)} in the {what} are not nodes of the site: "
            'Slurm drops them ("Invalid hostnames"), so does gantry'
        ]


class _TreeBuilder:
    def __init__(self, doc: TopologyDoc, known: Sequence[str] | None) -> None:
        self.doc = doc
        self.decls: list[SwitchDecl] = list(doc.switches)
        self.nodes = _NodeTable(known)
        self.warnings: list[str] = []

    def build(self) -> Topology:
        doc = self.doc
        if not self.decls:
            raise TopologyInputError(
                f"{doc.source}: no SwitchName lines (topology/tree needs switches)"
            )
        ids: dict[str, int] = {}
        for index, decl in enumerate(self.decls):
            if decl.name in ids:
                first = self.decls[ids[decl.name]].where
                raise TopologyInputError(
                    f"{decl.where}: switch {decl.name!r} is already defined at {first}"
                )
            if len(decl.name) > MAX_SWITCH_NAME:
                raise TopologyInputError(
                    f"{decl.where}: switch name {decl.name[:20]!r}... is "
                    f"{len(decl.name)} characters (Slurm allows at most {MAX_SWITCH_NAME})"
                )
            if decl.nodes is not None and decl.switches is not None:
                raise TopologyInputError(
                    f"{decl.where}: switch {decl.name!r} has both Nodes= and Switches= "
                    "(a switch is a leaf with nodes or an upper switch with switches)"
                )
            ids[decl.name] = index
        count = len(self.decls)
        leaf_nodes, node_leaf_list = self._leaves()
        children = self._children(ids)
        parent = np.full(count, -1, dtype=np.int32)
        parents_of: dict[int, list[int]] = {}
        for index, kids in enumerate(children):
            for child in kids:
                parents_of.setdefault(child, []).append(index)
                parent[child] = index  # Slurm: the last switch listing a child is its parent
        for child, parents in parents_of.items():
            if len(parents) > 1:
                names = ", ".join(self.decls[p].name for p in parents)
                self.warnings.append(
                    f"{self.decls[child].where}: switch {self.decls[child].name!r} is a child "
                    f"of {names}: Slurm records the last ({self.decls[parents[-1]].name}) as "
                    "its parent, so does gantry"
                )
        level = self._levels(children)
        node_leaf = np.asarray(node_leaf_list, dtype=np.int32)
        self.warnings.extend(self.nodes.invalid_warning("switch configuration"))
        lost = [self.nodes.names[i] for i in np.flatnonzero(node_leaf < 0)]
        if lost:
            self.warnings.append(
                f"switches lack access to {len(lost)} nodes ({_listing(lost)}): "
                "Slurm never allocates them under topology/tree"
            )
        roots = [self.decls[i].name for i in np.flatnonzero(parent < 0)]
        if len(roots) > 1:
            self.warnings.append(
                f"no switch reaches all nodes: {len(roots)} top-level switches "
                f"({', '.join(roots[:8])}{', ...' if len(roots) > 8 else ''}) have no common "
                "parent; Slurm never places a job across them (unless TopologyParam="
                "TopoOptional and the job does not ask for --switches), nor does gantry"
            )
        return Topology(
            kind="tree",
            source=doc.source,
            node_names=tuple(self.nodes.names),
            switch_names=tuple(d.name for d in self.decls),
            switch_parent=parent,
            switch_level=level,
            children=tuple(tuple(k) for k in children),
            node_leaf=node_leaf,
            leaf_nodes=tuple(tuple(n) for n in leaf_nodes),
            declared_switches=count,
            warnings=tuple(self.warnings),
        )

    def _leaves(self) -> tuple[list[list[int]], list[int]]:
        leaf_nodes: list[list[int]] = [[] for _ in self.decls]
        first_leaf: dict[int, int] = {}
        multi: dict[int, list[int]] = {}
        for index, decl in enumerate(self.decls):
            if decl.nodes is None:
                continue
            names = hostlists.expand(decl.nodes, f"{decl.where}: Nodes")
            seen: set[int] = set()
            for node in self.nodes.resolve(names):
                if node in seen:
                    continue
                seen.add(node)
                if node in first_leaf:
                    multi.setdefault(node, [first_leaf[node]]).append(index)
                    continue
                first_leaf[node] = index
                leaf_nodes[index].append(node)
        if multi:
            example = next(iter(multi))
            where = ", ".join(self.decls[s].name for s in multi[example])
            shared = _listing([self.nodes.names[n] for n in multi])
            self.warnings.append(
                f"multiple leaf switches contain nodes {shared}"
                f" (e.g. {self.nodes.names[example]} on {where}): Slurm keeps them on every "
                "switch; gantry places each under the first switch that lists it"
            )
        node_leaf = [first_leaf.get(n, -1) for n in range(len(self.nodes.names))]
        return leaf_nodes, node_leaf

    def _children(self, ids: dict[str, int]) -> list[list[int]]:
        children: list[list[int]] = [[] for _ in self.decls]
        for index, decl in enumerate(self.decls):
            if decl.switches is None:
                continue
            for name in hostlists.expand(decl.switches, f"{decl.where}: Switches"):
                child = ids.get(name)
                if child is None:
                    raise TopologyInputError(
                        f"{decl.where}: switch {decl.name!r} lists child {name!r}, "
                        "which is not a defined switch"
                    )
                if child == index:
                    raise TopologyInputError(
                        f"{decl.where}: switch {decl.name!r} lists itself as a child"
                    )
                if child not in children[index]:
                    children[index].append(child)
        return children

    def _levels(self, children: list[list[int]]) -> np.ndarray:
        level = np.full(len(self.decls), -1, dtype=np.int32)
        state = [0] * len(self.decls)  # 0 new, 1 on the current path, 2 done
        for start in range(len(self.decls)):
            if state[start]:
                continue
            stack = [(start, 0)]
            state[start] = 1
            while stack:
                switch, i = stack.pop()
                if i < len(children[switch]):
                    stack.append((switch, i + 1))
                    child = children[switch][i]
                    if state[child] == 1:
                        path = [self.decls[s].name for s, _ in stack] + [self.decls[child].name]
                        path = path[path.index(self.decls[child].name) :]
                        raise TopologyInputError(
                            f"{self.decls[child].where}: switch configuration is not a tree "
                            f"(cycle {' -> '.join(shown(p) for p in path)})"
                        )
                    if state[child] == 0:
                        state[child] = 1
                        stack.append((child, 0))
                    continue
                kids = children[switch]
                level[switch] = 1 + max(int(level[c]) for c in kids) if kids else 0
                state[switch] = 2
        return level


class _BlockBuilder:
    def __init__(self, doc: TopologyDoc, known: Sequence[str] | None) -> None:
        self.doc = doc
        self.decls: list[BlockDecl] = list(doc.blocks)
        self.nodes = _NodeTable(known)
        self.warnings: list[str] = []

    def build(self) -> Topology:
        doc = self.doc
        if not self.decls:
            raise TopologyInputError(
                f"{doc.source}: no BlockName lines (topology/block needs blocks)"
            )
        seen: dict[str, BlockDecl] = {}
        for decl in self.decls:
            if decl.name in seen:
                raise TopologyInputError(
                    f"{decl.where}: block {decl.name!r} is already defined at "
                    f"{seen[decl.name].where}"
                )
            seen[decl.name] = decl
        base, levels = self._block_sizes()
        block_nodes = self._block_nodes()
        if base is None:
            base = len(block_nodes[0])
        for decl, members in zip(self.decls, block_nodes, strict=True):
            if len(members) < base:
                raise TopologyInputError(
                    f"{decl.where}: block {decl.name!r} has {len(members)} nodes, fewer than "
                    f"the base block size {base} (Slurm refuses to start)"
                )
        effective: list[int] = []
        for lvl in levels:  # Slurm stops at the first level that covers every block
            effective.append(1 << lvl)
            if effective[-1] >= len(self.decls):
                break
        return self._assemble(block_nodes, base, effective)

    def _block_sizes(self) -> tuple[int | None, list[int]]:
        sizes = self.doc.block_sizes
        if not sizes:
            return None, list(DEFAULT_BLOCK_LEVELS)
        where = self.doc.block_sizes_where or self.doc.source
        base = sizes[0]
        levels: set[int] = set()
        for size in sizes:
            ratio = size // base if base > 0 else 0
            if size <= 0 or size % base or ratio & (ratio - 1) or ratio > (1 << MAX_BLOCK_LEVEL):
                raise TopologyInputError(
                    f"{where}: BlockSizes value {size} is not allowed (expected the base block "
                    f"size {base} times a power of two up to 2^{MAX_BLOCK_LEVEL})"
                )
            levels.add(ratio.bit_length() - 1)
        return base, sorted(levels)

    def _block_nodes(self) -> list[list[int]]:
        owner: dict[int, int] = {}
        multi: list[int] = []
        out: list[list[int]] = []
        for index, decl in enumerate(self.decls):
            names = hostlists.expand(decl.nodes, f"{decl.where}: Nodes")
            members: list[int] = []
            for node in self.nodes.resolve(names):
                if node in owner:
                    if owner[node] != index:
                        multi.append(node)
                    continue
                owner[node] = index
                members.append(node)
            out.append(members)
        if multi:
            self.warnings.append(
                f"nodes {_listing([self.nodes.names[n] for n in multi])} are in more than one "
                "block: Slurm keeps them in every block listed; gantry uses the first"
            )
        self.warnings.extend(self.nodes.invalid_warning("block configuration"))
        self.owner = owner
        return out

    def _assemble(self, block_nodes: list[list[int]], base: int, sizes: list[int]) -> Topology:
        count = len(self.decls)
        names = [d.name for d in self.decls]
        levels = [0] * count
        members: list[list[int]] = [[i] for i in range(count)]  # base blocks per record
        # Slurm's aggregation: at level j, blocks i with i % size == 0 start a group unless
        # the group would be short and the previous level already covers the remainder.
        group_of = [[-1] * count for _ in sizes]  # [level][base block] -> record id
        group_of[0] = list(range(count))
        for j in range(1, len(sizes)):
            current = -1
            for i in range(count):
                if i % sizes[j] == 0:
                    remaining = count - i
                    if sizes[j] > remaining and sizes[j - 1] >= remaining:
                        current = -1
                        continue
                    current = len(members)
                    members.append([i])
                    levels.append(j)
                elif current >= 0:
                    members[current].append(i)
                group_of[j][i] = current
        for record in range(count, len(members)):
            names.append(_group_name([self.decls[i].name for i in members[record]]))
        root = len(members)
        names.append(SYNTHETIC_ROOT)
        levels.append(len(sizes))
        members.append(list(range(count)))
        parent = np.full(len(members), -1, dtype=np.int32)
        for record in range(root):
            first, level = members[record][0], levels[record]
            above = (group_of[j][first] for j in range(level + 1, len(sizes)))
            parent[record] = next((g for g in above if g >= 0), root)
        kids: list[list[int]] = [[] for _ in members]
        for record in range(root):
            kids[int(parent[record])].append(record)
        for k in kids:
            k.sort(key=lambda r: (members[r][0], -levels[r]))
        node_leaf = np.full(len(self.nodes.names), -1, dtype=np.int32)
        for node, block in self.owner.items():
            node_leaf[node] = block
        lost = [self.nodes.names[i] for i in np.flatnonzero(node_leaf < 0)]
        if lost:
            self.warnings.append(
                f"blocks lack access to {len(lost)} nodes ({_listing(lost)}): Slurm never "
                "allocates them under topology/block"
            )
        leaf_nodes = [tuple(b) for b in block_nodes] + [()] * (len(members) - count)
        return Topology(
            kind="block",
            source=self.doc.source,
            node_names=tuple(self.nodes.names),
            switch_names=tuple(names),
            switch_parent=parent,
            switch_level=np.asarray(levels, dtype=np.int32),
            children=tuple(tuple(k) for k in kids),
            node_leaf=node_leaf,
            leaf_nodes=tuple(leaf_nodes),
            block_sizes=tuple(base * s for s in sizes),
            declared_switches=count,
            warnings=tuple(self.warnings),
        )
