"""Reading a user's topology file: every I/O or encoding failure is one TopologyInputError line."""

from __future__ import annotations

from pathlib import Path

from topology.errors import TopologyInputError
from topology.user_files import require_regular_file

MAX_TOPOLOGY_BYTES = 256 * 1024 * 1024
"""Largest topology file read (27,500 nodes listed one by one take 0.25 MB)."""


def read_source(path: Path) -> str:
    """The file's UTF-8 text; a missing or unreadable file is a TopologyInputError naming it."""
    require_regular_file(path, "a topology file", MAX_TOPOLOGY_BYTES)
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise TopologyInputError(f"{path}: no such file") from None
    except (OSError, UnicodeDecodeError) as err:
        raise TopologyInputError(f"{path}: cannot read ({err})") from None
