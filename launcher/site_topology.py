"""The topology of a site: from its config's ``topology`` section or the file it names.

``topology.file`` ending in .yaml/.yml is read as topology.yaml, anything else as
topology.conf; relative paths resolve next to the site file. Nodes the topology names that
are not in ``nodes.names`` are dropped with a warning, as Slurm drops unknown hostnames.
"""

from __future__ import annotations

from pathlib import Path

from launcher.errors import UserInputError
from launcher.site_config import LoadedSite, TopologySection
from topology.build import build_topology
from topology.conf_format import load_topology_conf
from topology.document import BlockDecl, SwitchDecl, TopologyDoc
from topology.model import Topology
from topology.yaml_format import load_topology_yaml


def load_topology_file(path: Path, known_nodes: list[str] | None = None) -> Topology:
    """A topology.conf or topology.yaml file (chosen by extension)."""
    is_yaml = path.suffix in (".yaml", ".yml")
    doc = load_topology_yaml(path) if is_yaml else load_topology_conf(path)
    return build_topology(doc, known_nodes)


def section_document(section: TopologySection, source: str) -> TopologyDoc:
    """The declarations of a site config's inline topology section."""
    if section.plugin == "tree":
        return TopologyDoc(
            kind="tree",
            source=source,
            switches=tuple(
                SwitchDecl(s.name, f"{source}: topology.switches[{i}]", s.nodes, s.switches)
                for i, s in enumerate(section.switches)
            ),
        )
    if section.plugin == "block":
        return TopologyDoc(
            kind="block",
            source=source,
            blocks=tuple(
                BlockDecl(b.name, b.nodes, f"{source}: topology.blocks[{i}]")
                for i, b in enumerate(section.blocks)
            ),
            block_sizes=tuple(section.block_sizes),
            block_sizes_where=f"{source}: topology.block_sizes",
        )
    return TopologyDoc(kind="flat", source=source)


def site_topology(site: LoadedSite) -> Topology:
    """Build the topology a site config describes."""
    section = site.config.topology
    nodes = site.config.nodes.node_list()
    if section.file:
        topology = load_topology_file(site.resolve(section.file), nodes)
        if section.plugin != "flat" and topology.kind != section.plugin:
            raise UserInputError(
                f"{site.path}: topology.plugin is {section.plugin!r} but {section.file} "
                f"describes a {topology.kind} topology"
            )
        return topology
    return build_topology(section_document(section, str(site.path)), nodes)
