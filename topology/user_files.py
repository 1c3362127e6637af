"""Files a user names (configs, topology files, token shards, checkpoint manifests) must be
regular files: opening a FIFO to read waits for a writer forever, and /dev/zero never ends.
Names the file system cannot take (a part over 255 bytes) are refused before it is asked."""

from __future__ import annotations

import os
from pathlib import Path

from topology.errors import UserInputError, brief, shown

MAX_NAME_BYTES = 255
"""Longest file or directory name (one part of a path) Linux file systems take."""
MAX_PATH_BYTES = 4095
"""Longest path the kernel takes (PATH_MAX less the terminating NUL)."""


def require_short_names(path: Path, what: str) -> None:
    """UserInputError naming ``what`` (a flag, an argument) when a part of ``path`` is longer
    than a file name may be, or the whole is longer than a path may be (the file system
    would only say "File name too long", from wherever the path is first used)."""
    for part in path.parts:
        size = len(os.fsencode(part))
        if size > MAX_NAME_BYTES:
            raise UserInputError(f"{what}: {shown(part[:40])}... is not allowed (a file name "
                                 f"of at most {MAX_NAME_BYTES} bytes; this one has {size})")
    size = len(os.fsencode(path))
    if size > MAX_PATH_BYTES:
        raise UserInputError(f"{what}: {brief(str(path))} is not allowed (a path of at most "
                             f"{MAX_PATH_BYTES} bytes; this one has {size})")


def require_regular_file(path: Path, expected: str, max_bytes: int | None = None) -> None:
    """Raise a one-line UserInputError when ``path`` exists but is not a regular file (or is
    larger than ``max_bytes``); a missing path is left to the caller's own message."""
    try:
        if not path.exists():
            return
        if not path.is_file():
            raise UserInputError(f"{path}: not a regular file (expected {expected})")
        size = path.stat().st_size
    except OSError as err:  # e.g. a name too long, a link loop
        raise UserInputError(f"{path}: cannot read ({err.strerror or err})") from None
    if max_bytes is not None and size > max_bytes:
        raise UserInputError(f"{path}: {size} bytes is not allowed (expected {expected} of at "
                             f"most {max_bytes} bytes)")


def require_writable_file(path: Path, flag: str) -> None:
    """Check, before anything is done, that ``path`` (the value of ``flag``) can be written
    as a file: not a directory, its parent a directory, a name the file system takes.
    UserInputError naming the flag otherwise."""
    require_short_names(path, flag)
    try:
        if path.is_dir():
            raise UserInputError(f"{flag}: {path} is a directory (expected a file name)")
        if not path.resolve().parent.is_dir():
            raise UserInputError(f"{flag}: {path.parent} is not a directory")
    except (OSError, RuntimeError) as err:  # a link loop, a path too long
        raise UserInputError(f"{flag}: {brief(str(path))} is not allowed "
                             f"({getattr(err, 'strerror', None) or err})") from None


def require_output_dir(path: Path, flag: str) -> None:
    """Check, before anything is done, that ``path`` (the value of ``flag``) can be an output
    directory: names the file system takes, a directory or nothing yet (made then)."""
    require_short_names(path, flag)
    try:
        if os.path.lexists(path) and not path.is_dir():
            raise UserInputError(f"{flag}: {path} exists and is not a directory")
    except OSError as err:  # a link loop, a parent that is a file
        raise UserInputError(f"{flag}: {brief(str(path))} is not allowed "
                             f"({err.strerror or err})") from None
