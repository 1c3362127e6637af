"""Slurm's topology.conf: parse (tree and block syntax) and write.

Syntax as Slurm's parser reads it: one declaration per line, ``Key=Value`` pairs separated by
blanks, keys case-insensitive, values optionally in double quotes, ``#`` starts a comment
(``\\#`` is a literal ``#``), a line ending in ``\\`` continues on the next. Lines are

    SwitchName=<name> [Nodes=<hostlist>] [Switches=<hostlist>] [LinkSpeed=<int>]   (tree)
    BlockName=<name> Nodes=<hostlist>                                             (block)
    BlockSizes=<int>[,<int>...]                                                    (block)

LinkSpeed is accepted and ignored (Slurm ignores it too). Every syntax error is reported as
``file:line: what is wrong``.
"""

from __future__ import annotations

import re
from pathlib import Path

from topology import hostlists
from topology.document import BlockDecl, SwitchDecl, TopologyDoc
from topology.errors import TopologyInputError, brief
from topology.model import Topology
from topology.source_file import read_source
from topology.whole_numbers import MAX_DIGITS, is_whole, read_whole

_SWITCH_KEYS = ("Nodes", "Switches", "LinkSpeed")
_BLOCK_KEYS = ("Nodes",)


def load_topology_conf(path: Path) -> TopologyDoc:
    """Read and parse a topology.conf file."""
    return parse_topology_conf(read_source(path), str(path))


def _logical_lines(text: str) -> list[tuple[int, str]]:
    """Comments stripped, continuations joined; each with the number of its first line."""
    out: list[tuple[int, str]] = []
    pending: list[str] = []
    start = 0
    for number, raw in enumerate(text.splitlines(), start=1):
        line = _strip_comment(raw).rstrip()
        if not pending:
            start = number
        if line.endswith("\\"):
            pending.append(line[:-1])
            continue
        pending.append(line)
        joined = " ".join(pending).strip()
        pending = []
        if joined:
            out.append((start, joined))
    if pending and " ".join(pending).strip():
        out.append((start, " ".join(pending).strip()))
    return out


def _strip_comment(line: str) -> str:
    index = 0
    while True:
        index = line.find("#", index)
        if index < 0:
            return line.replace("\\#", "#")
        if index > 0 and line[index - 1] == "\\":
            index += 1
            continue
        return line[:index].replace("\\#", "#")


_PIECE = re.compile(r"""[^ \t\r\n'"\\]+|\\(.)|'([^']*)'|"((?:[^"\\]|\\.)*)"|([ \t\r\n]+)""",
                    re.S)  # blanks as shlex's: space, tab, CR, LF
_DOUBLE_QUOTED_ESCAPE = re.compile(r'\\(["\\])')


def split_words(line: str) -> list[str]:
    """The line's words as a POSIX shell splits them ('...', "...", backslash escapes), in
    time linear in the line (shlex.split is quadratic in a word's length: a 300,000-node
    Nodes= list took 83 s). Raises ValueError for an unclosed quote or a trailing backslash."""
    words: list[str] = []
    pieces: list[str] = []
    in_word = False
    pos = 0
    while pos < len(line):
        match = _PIECE.match(line, pos)
        if match is None:
            raise ValueError("no closing quotation" if line[pos] in "'\"" else
                             "no escaped character")
        escaped, single, double, blank = match.groups()
        if blank is not None:
            if in_word:
                words.append("".join(pieces))
            pieces, in_word = [], False
        else:
            in_word = True
            if escaped is not None:
                pieces.append(escaped)
            elif single is not None:
                pieces.append(single)
            elif double is not None:
                pieces.append(_DOUBLE_QUOTED_ESCAPE.sub(r"\1", double))
            else:
                pieces.append(match.group(0))
        pos = match.end()
    if in_word:
        words.append("".join(pieces))
    return words


def _pairs(where: str, line: str) -> list[tuple[str, str]]:
    try:
        tokens = split_words(line.replace("\\#", "#"))
    except ValueError as err:
        raise TopologyInputError(f"{where}: cannot parse the line ({err})") from None
    pairs: list[tuple[str, str]] = []
    for token in tokens:
        key, sep, value = token.partition("=")
        if not sep or not key:
            raise TopologyInputError(f"{where}: {token!r} is not Key=Value")
        pairs.append((key, value))
    return pairs


def _options(where: str, pairs: list[tuple[str, str]], allowed: tuple[str, ...]) -> dict[str, str]:
    kind = pairs[0][0]
    out: dict[str, str] = {}
    for key, value in pairs[1:]:
        canonical = next((a for a in allowed if a.lower() == key.lower()), None)
        if canonical is None:
            raise TopologyInputError(
                f"{where}: unknown key {key!r} on a {kind} line (allowed: {', '.join(allowed)})"
            )
        if canonical in out:
            raise TopologyInputError(f"{where}: {canonical}= is given twice")
        if not value:
            raise TopologyInputError(f"{where}: {canonical}= is empty")
        out[canonical] = value
    return out


def parse_topology_conf(text: str, source: str) -> TopologyDoc:
    """Parse topology.conf text; ``source`` names it in messages."""
    switches: list[SwitchDecl] = []
    blocks: list[BlockDecl] = []
    block_sizes: tuple[int, ...] = ()
    sizes_where = ""
    first_of_kind: dict[str, str] = {}
    for number, line in _logical_lines(text):
        where = f"{source}:{number}"
        pairs = _pairs(where, line)
        key, value = pairs[0]
        kind = key.lower()
        if kind in ("switchname", "blockname", "blocksizes"):
            family = "tree" if kind == "switchname" else "block"
            other = "block" if family == "tree" else "tree"
            if other in first_of_kind:
                raise TopologyInputError(
                    f"{where}: {key}= in a file that has {other} lines (first at "
                    f"{first_of_kind[other]}); a topology.conf is either tree or block"
                )
            first_of_kind.setdefault(family, where)
        if kind == "switchname":
            if not value:
                raise TopologyInputError(f"{where}: SwitchName= is empty")
            options = _options(where, pairs, _SWITCH_KEYS)
            if "LinkSpeed" in options and not is_whole(options["LinkSpeed"]):
                raise TopologyInputError(
                    f"{where}: LinkSpeed={brief(options['LinkSpeed'])} is not allowed "
                    f"(expected a non-negative integer of at most {MAX_DIGITS} digits)"
                )
            switches.append(SwitchDecl(value, where, options.get("Nodes"), options.get("Switches")))
        elif kind == "blockname":
            if not value:
                raise TopologyInputError(f"{where}: BlockName= is empty")
            options = _options(where, pairs, _BLOCK_KEYS)
            if "Nodes" not in options:
                raise TopologyInputError(f"{where}: block {value!r} has no Nodes=")
            blocks.append(BlockDecl(value, options["Nodes"], where))
        elif kind == "blocksizes":
            if len(pairs) > 1:
                raise TopologyInputError(f"{where}: BlockSizes= must be alone on its line")
            if block_sizes:
                raise TopologyInputError(
                    f"{where}: BlockSizes= is given twice (first at {sizes_where})"
                )
            block_sizes = _parse_sizes(where, value)
            sizes_where = where
        elif kind == "include":
            raise TopologyInputError(f"{where}: Include is not supported (use one file)")
        else:
            raise TopologyInputError(
                f"{where}: unknown key {key!r} (expected SwitchName=, BlockName= or BlockSizes=)"
            )
    if not switches and not blocks:
        raise TopologyInputError(f"{source}: no SwitchName= or BlockName= lines")
    if switches:
        return TopologyDoc(kind="tree", source=source, switches=tuple(switches))
    return TopologyDoc(
        kind="block",
        source=source,
        blocks=tuple(blocks),
        block_sizes=block_sizes,
        block_sizes_where=sizes_where,
    )


def _parse_sizes(where: str, value: str) -> tuple[int, ...]:
    sizes: list[int] = []
    for part in value.split(","):
        size = read_whole(part.strip())
        if not size:
            raise TopologyInputError(
                f"{where}: BlockSizes value {brief(part)} is not allowed (expected positive "
                f"integers of at most {MAX_DIGITS} digits)"
            )
        sizes.append(size)
    return tuple(sizes)


def write_topology_conf(topology: Topology) -> str:
    """topology.conf text for a tree or block topology."""
    header = f"# Generated by gantry from {topology.source}\n"
    if topology.kind == "tree":
        lines = []
        for switch in range(topology.declared_switches):
            name = topology.switch_names[switch]
            if topology.is_leaf(switch) or not topology.children[switch]:
                members = [topology.node_names[n] for n in topology.leaf_nodes[switch]]
                nodes = f" Nodes={hostlists.collect(members)}" if members else ""
                lines.append(f"SwitchName={name}{nodes}")
            else:
                kids = [topology.switch_names[c] for c in topology.children[switch]]
                lines.append(f"SwitchName={name} Switches={','.join(kids)}")
        return header + "\n".join(lines) + "\n"
    if topology.kind == "block":
        lines = [f"BlockSizes={','.join(str(s) for s in topology.block_sizes)}"]
        for block in range(topology.declared_switches):
            members = [topology.node_names[n] for n in topology.leaf_nodes[block]]
            lines.append(
                f"BlockName={topology.switch_names[block]} Nodes={hostlists.collect(members)}"
            )
        return header + "\n".join(lines) + "\n"
    raise TopologyInputError(f"{topology.source}: a flat topology has no topology.conf")
