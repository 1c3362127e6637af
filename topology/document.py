"""What a topology file says, before validation: switch and block declarations with their origin.

Every parser (topology.conf, topology.yaml, `scontrol show topology`, the site config) produces
a :class:`TopologyDoc`; :func:`topology.build.build_topology` validates it the way Slurm does
and turns it into the array model. Each declaration keeps ``where`` ("file:line") so that every
error and warning points at the line that caused it.
"""

from __future__ import annotations

from dataclasses import dataclass

from topology.model import TopologyKind


@dataclass(frozen=True)
class SwitchDecl:
    """One switch line: a leaf (Nodes=) or an upper switch (Switches=), or neither (empty)."""

    name: str
    """SwitchName."""
    where: str
    """Origin for messages, e.g. "topology.conf:12"."""
    nodes: str | None = None
    """Hostlist expression of the nodes on this leaf switch."""
    switches: str | None = None
    """Hostlist expression of the child switches of this upper switch."""


@dataclass(frozen=True)
class BlockDecl:
    """One base block line (BlockName= Nodes=)."""

    name: str
    """BlockName."""
    nodes: str
    """Hostlist expression of the nodes in this block."""
    where: str
    """Origin for messages, e.g. "topology.conf:3"."""


@dataclass(frozen=True)
class TopologyDoc:
    """A whole topology as declared: tree switches, or blocks with BlockSizes, or flat."""

    kind: TopologyKind
    """tree, block or flat."""
    source: str
    """File or other origin, for messages."""
    switches: tuple[SwitchDecl, ...] = ()
    """tree: the switch declarations in file order."""
    blocks: tuple[BlockDecl, ...] = ()
    """block: the base block declarations in file order (the order defines aggregation)."""
    block_sizes: tuple[int, ...] = ()
    """block: BlockSizes as written (node counts), empty for Slurm's default."""
    block_sizes_where: str = ""
    """block: origin of the BlockSizes line, for messages."""
