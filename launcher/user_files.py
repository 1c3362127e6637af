"""Files a user names (configs, topology files, token shards, checkpoint manifests) must be
regular files: opening a FIFO to read waits for a writer forever, and /dev/zero never ends."""

from __future__ import annotations

from pathlib import Path

from launcher.errors import UserInputError, brief


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
    if len(path.name.encode()) > 255:
        raise UserInputError(f"{flag}: {path.name[:40]}... is not allowed (a file name of at "
                             "most 255 bytes)")
    try:
        if path.is_dir():
            raise UserInputError(f"{flag}: {path} is a directory (expected a file name)")
        if not path.resolve().parent.is_dir():
            raise UserInputError(f"{flag}: {path.parent} is not a directory")
    except (OSError, RuntimeError) as err:  # a link loop, a path too long
        raise UserInputError(f"{flag}: {brief(str(path))} is not allowed "
                             f"({getattr(err, 'strerror', None) or err})") from None
