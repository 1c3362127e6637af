"""Parse ``scontrol show topology`` output (Slurm 22.05 through 24.11 shapes) into declarations.

Tree (22.05 and later; upper switches also list all their nodes, which are ignored here):

    SwitchName=s0 Level=0 LinkSpeed=1 Nodes=n[1-2]
    SwitchName=s2 Level=1 LinkSpeed=1 Nodes=n[1-4] Switches=s[0-1]

Block (23.11 without BlockSize=, 24.11 with it and with the aggregated blocks):

    BlockName=b1 BlockIndex=0 Nodes=n[1-4] BlockSize=4
    AggregatedBlock=b[1-2] BlockIndex=2 Nodes=n[1-8] BlockSize=8
"""

from __future__ import annotations

from topology.document import BlockDecl, SwitchDecl, TopologyDoc
from topology.errors import TopologyInputError, brief
from topology.whole_numbers import read_whole

SOURCE = "scontrol show topology"


def _fields(where: str, line: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for token in line.split():
        key, sep, value = token.partition("=")
        if not sep:
            raise TopologyInputError(f"{where}: {token!r} is not Key=Value")
        out[key] = value
    return out


def parse_scontrol_topology(text: str, source: str = SOURCE) -> TopologyDoc:
    """Parse the whole output of ``scontrol show topology``."""
    switches: list[SwitchDecl] = []
    blocks: list[BlockDecl] = []
    sizes: set[int] = set()
    base_size: int | None = None
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line:
            continue
        where = f"{source}:{number}"
        if line.startswith("SwitchName="):
            f = _fields(where, line)
            level = read_whole(f.get("Level", "0"))
            if level is None:
                raise TopologyInputError(f"{where}: Level={brief(f['Level'])} is not an integer")
            if level > 0:
                if "Switches" not in f:
                    raise TopologyInputError(f"{where}: switch at Level={level} lists no Switches=")
                switches.append(SwitchDecl(f["SwitchName"], where, switches=f["Switches"]))
            else:
                switches.append(SwitchDecl(f["SwitchName"], where, nodes=f.get("Nodes") or None))
        elif line.startswith(("BlockName=", "AggregatedBlock=")):
            f = _fields(where, line)
            size_text = f.get("BlockSize")
            size = None if size_text is None else read_whole(size_text)
            if size_text is not None:
                if not size:
                    raise TopologyInputError(
                        f"{where}: BlockSize={brief(size_text)} is not a positive integer")
                sizes.add(size)
            if "BlockName" in f:
                if not f.get("Nodes"):
                    raise TopologyInputError(f"{where}: block {f['BlockName']!r} lists no Nodes=")
                if base_size is None and size is not None:
                    base_size = size
                blocks.append(BlockDecl(f["BlockName"], f["Nodes"], where))
        else:
            raise TopologyInputError(
                f"{where}: {line[:40]!r} is not a SwitchName=, BlockName= or AggregatedBlock= line"
            )
    if switches and blocks:
        raise TopologyInputError(f"{source}: has both switches and blocks")
    if switches:
        return TopologyDoc(kind="tree", source=source, switches=tuple(switches))
    if blocks:
        ordered = tuple(sorted(s for s in sizes if base_size is None or s >= base_size))
        return TopologyDoc(
            kind="block",
            source=source,
            blocks=tuple(blocks),
            block_sizes=ordered,
            block_sizes_where=source,
        )
    raise TopologyInputError(
        f"{source}: no topology information (is a topology plugin configured?)"
    )
