"""Who may use the preflight state dir: its owner writes it, everyone else only reads it, and
nobody uses a directory that someone else could have written.

The safe layout (the default when the Slurm scripts create the directory): the state dir is
created by the first `gantry preflight --drain` of the HealthCheckProgram/Prolog/Epilog, i.e.
by root, mode 0755 with 0644 records; jobs (the gate and its preflight step, running as the
job's user) read it. A state dir, one of its subdirectories or a directory above it that a
user other than root and the state dir's owner owns, or that group or others may write
(a sticky directory such as /tmp excepted above the state dir), is not trusted: nothing in it
is read or written, since clean-pass streaks written there could make gantry resume a node.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass
from pathlib import Path

SUBDIRS = ("history", "counters")
"""The state dir's subdirectories (launcher/preflight/state.py)."""

DIR_MODE = 0o755
"""Directories gantry creates in the state dir: written by the owner, read by jobs."""
FILE_MODE = 0o644
"""Records gantry writes: written by the owner, read by jobs."""


@dataclass(frozen=True)
class StateAccess:
    """What this process may do with a state dir."""

    root: Path
    """The state dir."""
    read: bool
    """Its records may be trusted (nobody but the owner and root can have written them)."""
    write: bool
    """This process is its writer: it owns the directory (or may create it)."""
    problem: str = ""
    """Why it is not trusted, or why this process only reads it (for the log)."""


def _chain(path: Path) -> list[Path]:
    """``path`` and every directory above it, top first."""
    return [*reversed(path.parents), path]


def _lstat(path: Path) -> os.stat_result | None:
    try:
        return os.lstat(path)
    except FileNotFoundError:
        return None


def _unsafe(path: Path, st: os.stat_result, owners: set[int], above: bool) -> str:
    """Why ``path`` could have been changed by someone other than ``owners``, or ''."""
    if stat.S_ISLNK(st.st_mode):
        return ""  # a link's own mode means nothing; its directory and its target are checked
    if not stat.S_ISDIR(st.st_mode):
        return f"{path} is not a directory"
    if st.st_uid not in owners:
        return f"{path} belongs to uid {st.st_uid}, not root or the state dir's owner"
    if st.st_mode & 0o022 and not (above and st.st_mode & stat.S_ISVTX):
        return f"{path} is writable by group or others (mode {stat.S_IMODE(st.st_mode):04o})"
    return ""


def state_access(root: Path, euid: int | None = None) -> StateAccess:
    """Whether this process (effective uid ``euid``, default its own) may read and write
    the state dir ``root``."""
    try:
        return _access(root, os.geteuid() if euid is None else euid)
    except OSError as err:  # a directory on the way this process may not look into
        where = err.filename or root
        return StateAccess(root, read=False, write=False,
                           problem=f"{where} cannot be examined ({err.strerror})")


def _access(root: Path, uid: int) -> StateAccess:
    given = Path(os.path.abspath(root))
    real = Path(os.path.realpath(given))
    top = _lstat(real)
    owner = top.st_uid if top is not None else uid
    owners = {0, owner}
    checked = [*_chain(given), *_chain(real), *(real / sub for sub in SUBDIRS)]
    for path in dict.fromkeys(checked):
        st = _lstat(path)
        if st is None:
            continue
        above = path != real and path not in {real / sub for sub in SUBDIRS}
        problem = _unsafe(path, st, owners, above)
        if problem:
            return StateAccess(root, read=False, write=False, problem=problem)
    if top is not None:
        if owner == uid:
            return StateAccess(root, read=True, write=True)
        return StateAccess(root, read=True, write=False,
                           problem=f"{root} belongs to uid {owner}, which writes it")
    parent = next(p for p in reversed(_chain(real)) if _lstat(p) is not None)
    parent_st = os.lstat(parent)
    if uid == 0 or (parent_st.st_uid == uid and not parent_st.st_mode & 0o022):
        return StateAccess(root, read=True, write=True)  # what it creates is its own
    return StateAccess(root, read=True, write=False,
                       problem=f"{root} does not exist and uid {uid} does not create it under "
                       f"{parent} (its owner's Slurm scripts do)")


def make_dirs(path: Path) -> None:
    """Create ``path`` and missing parents as DIR_MODE (not what the umask leaves: a
    group-writable state dir would no longer be trusted)."""
    missing = [p for p in _chain(path) if not p.exists()]
    path.mkdir(parents=True, exist_ok=True)
    for made in missing:
        os.chmod(made, DIR_MODE)
