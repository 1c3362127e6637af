"""Reading a user's topology file: every I/O or encoding failure is one UserInputError line."""

from __future__ import annotations

from pathlib import Path

from launcher.errors import UserInputError


def read_source(path: Path) -> str:
    """The file's UTF-8 text; a missing or unreadable file is a UserInputError naming it."""
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise UserInputError(f"{path}: no such file") from None
    except (OSError, UnicodeDecodeError) as err:
        raise UserInputError(f"{path}: cannot read ({err})") from None
