"""Slurm's topology.yaml (25.05+): parse and write.

The file is a list of named topologies, each with exactly one of ``tree``, ``block`` or
``flat`` (see topology.yaml(5)):

    - topology: topo1
      cluster_default: true
      tree:
        switches:
          - switch: s0
            children: s[1-2]
          - switch: s1
            nodes: node[01-04]
    - topology: topo2
      block:
        block_sizes: [4, 16]
        blocks:
          - block: b1
            nodes: node[01-04]
    - topology: topo3
      flat: true

gantry plans on one of them: the one named, else the first with ``cluster_default: true``,
else the only one. Errors carry ``file:line``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from topology import hostlists
from topology.document import BlockDecl, SwitchDecl, TopologyDoc
from topology.errors import TopologyInputError, brief, tag_problem
from topology.model import Topology
from topology.source_file import read_source


def load_topology_yaml(path: Path, name: str | None = None) -> TopologyDoc:
    """Read and parse a topology.yaml file (see :func:`parse_topology_yaml`)."""
    return parse_topology_yaml(read_source(path), str(path), name)


class _Reader:
    def __init__(self, source: str) -> None:
        self.source = source
        self.constructor = yaml.constructor.SafeConstructor()

    def where(self, node: yaml.Node) -> str:
        return f"{self.source}:{node.start_mark.line + 1}"

    def mapping(self, node: yaml.Node, what: str, allowed: tuple[str, ...]) -> dict[str, yaml.Node]:
        if not isinstance(node, yaml.MappingNode):
            raise TopologyInputError(f"{self.where(node)}: {what} must be a mapping")
        out: dict[str, yaml.Node] = {}
        for key_node, value_node in node.value:
            key = key_node.value if isinstance(key_node, yaml.ScalarNode) else None
            if key not in allowed:
                raise TopologyInputError(
                    f"{self.where(key_node)}: unknown key {key!r} in {what} "
                    f"(allowed: {', '.join(allowed)})"
                )
            if key in out:
                raise TopologyInputError(
                    f"{self.where(key_node)}: {key!r} is given twice in {what}"
                )
            out[key] = value_node
        return out

    def sequence(self, node: yaml.Node, what: str) -> list[yaml.Node]:
        if not isinstance(node, yaml.SequenceNode):
            raise TopologyInputError(f"{self.where(node)}: {what} must be a list")
        return list(node.value)

    def scalar(self, node: yaml.Node, what: str, kind: type) -> Any:
        if not isinstance(node, yaml.ScalarNode):
            raise TopologyInputError(f"{self.where(node)}: {what} must be a {kind.__name__}")
        try:
            value = self.constructor.construct_object(node)
        except yaml.YAMLError as err:  # a tag it has no constructor for: !foo, !!python/...
            raise TopologyInputError(
                f"{self.where(node)}: {what} {brief(node.value)} is not allowed "
                f"({getattr(err, 'problem', None) or 'invalid YAML'})"
            ) from None
        except Exception as err:  # PyYAML's constructors: !!int abc, !!bool x, ...
            raise TopologyInputError(
                f"{self.where(node)}: {what} {brief(node.value)} is not allowed "
                f"({tag_problem(err)})"
            ) from None
        if kind is str and isinstance(value, int | float) and not isinstance(value, bool):
            value = str(node.value)
        if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
            raise TopologyInputError(
                f"{self.where(node)}: {what} {brief(node.value)} is not allowed (expected "
                f"{'true or false' if kind is bool else 'a ' + kind.__name__})"
            )
        return value


def parse_topology_yaml(text: str, source: str, name: str | None = None) -> TopologyDoc:
    """Parse topology.yaml text and return the chosen topology's declarations."""
    try:
        root = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f"{source}:{mark.line + 1}" if mark is not None else source
        raise TopologyInputError(
            f"{where}: {getattr(err, 'problem', None) or 'invalid YAML'}"
        ) from None
    except RecursionError:
        raise TopologyInputError(f"{source}: nested too deeply to read") from None
    if root is None:
        raise TopologyInputError(f"{source}: empty file (expected a list of topologies)")
    reader = _Reader(source)
    entries = reader.sequence(root, "the top level")
    if not entries:
        raise TopologyInputError(f"{source}: no topologies defined")
    chosen: tuple[yaml.Node, dict[str, yaml.Node]] | None = None
    default: tuple[yaml.Node, dict[str, yaml.Node]] | None = None
    names: list[str] = []
    for entry in entries:
        fields = reader.mapping(
            entry, "a topology", ("topology", "cluster_default", "tree", "block", "flat")
        )
        if "topology" not in fields:
            raise TopologyInputError(f"{reader.where(entry)}: a topology needs 'topology: <name>'")
        topo_name = reader.scalar(fields["topology"], "topology", str)
        if topo_name in names:
            raise TopologyInputError(
                f"{reader.where(fields['topology'])}: topology {topo_name!r} is defined twice"
            )
        names.append(topo_name)
        kinds = [k for k in ("tree", "block", "flat") if k in fields]
        if len(kinds) != 1:
            raise TopologyInputError(
                f"{reader.where(entry)}: topology {topo_name!r} must have exactly one of "
                f"tree, block, flat (has {', '.join(kinds) or 'none'})"
            )
        is_default = "cluster_default" in fields and reader.scalar(
            fields["cluster_default"], "cluster_default", bool
        )
        if name is not None and topo_name == name:
            chosen = (entry, fields)
        if is_default and default is None:
            default = (entry, fields)
    if name is not None and chosen is None:
        raise TopologyInputError(
            f"{source}: no topology named {name!r} (defined: {', '.join(names)})"
        )
    if chosen is None:
        chosen = default
    if chosen is None:
        if len(entries) > 1:
            raise TopologyInputError(
                f"{source}: {len(entries)} topologies and none has cluster_default: true "
                f"(name one of {', '.join(names)})"
            )
        chosen = (
            entries[0],
            reader.mapping(
                entries[0], "a topology", ("topology", "cluster_default", "tree", "block", "flat")
            ),
        )
    return _topology(reader, *chosen)


def _topology(reader: _Reader, entry: yaml.Node, fields: dict[str, yaml.Node]) -> TopologyDoc:
    source = reader.source
    if "flat" in fields:
        if not reader.scalar(fields["flat"], "flat", bool):
            raise TopologyInputError(
                f"{reader.where(fields['flat'])}: flat must be true when given"
            )
        return TopologyDoc(kind="flat", source=source)
    if "tree" in fields:
        tree = reader.mapping(fields["tree"], "tree", ("switches",))
        if "switches" not in tree:
            raise TopologyInputError(f"{reader.where(fields['tree'])}: tree needs 'switches'")
        switches: list[SwitchDecl] = []
        for item in reader.sequence(tree["switches"], "switches"):
            sw = reader.mapping(item, "a switch", ("switch", "children", "nodes"))
            if "switch" not in sw:
                raise TopologyInputError(f"{reader.where(item)}: a switch needs 'switch: <name>'")
            switches.append(
                SwitchDecl(
                    name=reader.scalar(sw["switch"], "switch", str),
                    where=reader.where(item),
                    nodes=reader.scalar(sw["nodes"], "nodes", str) if "nodes" in sw else None,
                    switches=(
                        reader.scalar(sw["children"], "children", str) if "children" in sw else None
                    ),
                )
            )
        return TopologyDoc(kind="tree", source=source, switches=tuple(switches))
    block = reader.mapping(fields["block"], "block", ("block_sizes", "blocks"))
    if "blocks" not in block:
        raise TopologyInputError(f"{reader.where(fields['block'])}: block needs 'blocks'")
    sizes: tuple[int, ...] = ()
    sizes_where = ""
    if "block_sizes" in block:
        sizes_where = reader.where(block["block_sizes"])
        sizes = tuple(
            reader.scalar(n, "block_sizes entry", int)
            for n in reader.sequence(block["block_sizes"], "block_sizes")
        )
        for size in sizes:
            if size <= 0:
                raise TopologyInputError(
                    f"{sizes_where}: block_sizes value {size} is not allowed "
                    "(expected positive integers)"
                )
    blocks: list[BlockDecl] = []
    for item in reader.sequence(block["blocks"], "blocks"):
        bl = reader.mapping(item, "a block", ("block", "nodes"))
        if "block" not in bl:
            raise TopologyInputError(f"{reader.where(item)}: a block needs 'block: <name>'")
        block_name = reader.scalar(bl["block"], "block", str)
        if "nodes" not in bl:
            raise TopologyInputError(f"{reader.where(item)}: block {block_name!r} has no nodes")
        blocks.append(
            BlockDecl(block_name, reader.scalar(bl["nodes"], "nodes", str), reader.where(item))
        )
    return TopologyDoc(
        kind="block",
        source=source,
        blocks=tuple(blocks),
        block_sizes=sizes,
        block_sizes_where=sizes_where,
    )


def write_topology_yaml(topology: Topology, name: str = "default") -> str:
    """topology.yaml text with one topology (cluster_default: true)."""
    entry: dict[str, Any] = {"topology": name, "cluster_default": True}
    if topology.kind == "tree":
        switches: list[dict[str, str]] = []
        for switch in range(topology.declared_switches):
            item = {"switch": topology.switch_names[switch]}
            if topology.is_leaf(switch) or not topology.children[switch]:
                members = [topology.node_names[n] for n in topology.leaf_nodes[switch]]
                if members:
                    item["nodes"] = hostlists.collect(members)
            else:
                item["children"] = ",".join(
                    topology.switch_names[c] for c in topology.children[switch]
                )
            switches.append(item)
        entry["tree"] = {"switches": switches}
    elif topology.kind == "block":
        blocks = [
            {
                "block": topology.switch_names[b],
                "nodes": hostlists.collect(
                    [topology.node_names[n] for n in topology.leaf_nodes[b]]
                ),
            }
            for b in range(topology.declared_switches)
        ]
        entry["block"] = {"block_sizes": list(topology.block_sizes), "blocks": blocks}
    else:
        entry["flat"] = True
    header = f"# Generated by gantry from {topology.source}\n"
    return header + yaml.safe_dump([entry], sort_keys=False, default_flow_style=False)
