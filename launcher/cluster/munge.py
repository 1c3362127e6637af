"""The embedded cluster's own munged: a private key, socket, pid, log and seed file under
the run dir, run as the `munge` user when gantry runs as root (munged refuses insecure
ownership), else as the calling user. Slurm finds it through AuthInfo=socket=<path>.
"""

from __future__ import annotations

import os
import pwd
import stat
from dataclasses import dataclass
from pathlib import Path

from launcher.atomic_write import write_bytes
from launcher.cluster.layout import RunLayout
from launcher.slurm.tools import require_tool

MUNGE_KEY_BYTES = 1024
"""Size of the generated key (munge accepts 32..1024 bytes; mungekey's default is 128)."""


@dataclass(frozen=True)
class MungeIdentity:
    """The account munged runs as."""

    user: str | None
    """User to switch to (None: stay the calling user)."""
    uid: int
    """Owner of the munge dir and key."""
    gid: int
    """Group of the munge dir and key."""


def munge_identity() -> MungeIdentity:
    """`munge` when we are root and that account exists, else the calling user."""
    if os.geteuid() == 0:
        try:
            entry = pwd.getpwnam("munge")
        except KeyError:
            return MungeIdentity(user=None, uid=0, gid=0)
        return MungeIdentity(user="munge", uid=entry.pw_uid, gid=entry.pw_gid)
    return MungeIdentity(user=None, uid=os.geteuid(), gid=os.getegid())


def prepare(layout: RunLayout, who: MungeIdentity) -> None:
    """Give the munge dir to munged's account and create the key once (kept across ups)."""
    os.chown(layout.munge_dir, who.uid, who.gid)
    os.chmod(layout.munge_dir, 0o755)
    if not layout.munge_key.exists():  # whole or not at all: a short key would be kept
        write_bytes(layout.munge_key, os.urandom(MUNGE_KEY_BYTES), mode=0o400, overwrite=False)
    os.chown(layout.munge_key, who.uid, who.gid)
    os.chmod(layout.munge_key, 0o400)


def munged_argv(layout: RunLayout) -> list[str]:
    """munged in the foreground with every path inside the run dir."""
    return [
        require_tool("munged"),
        "--foreground",
        f"--socket={layout.munge_socket}",
        f"--key-file={layout.munge_key}",
        f"--pid-file={layout.munge_pid_file}",
        f"--log-file={layout.munge_log}",
        f"--seed-file={layout.munge_seed}",
    ]


def unreachable_ancestor(path: Path, who: MungeIdentity) -> Path | None:
    """The first existing ancestor of ``path`` that munged's account cannot traverse
    (munged must reach its socket, key and seed dirs), or None when all can be."""
    if who.uid == 0:
        return None
    existing = [p for p in [path, *path.parents] if p.exists()]
    for directory in reversed(existing):
        info = directory.stat()
        if info.st_uid == who.uid:
            bit = stat.S_IXUSR
        elif info.st_gid == who.gid:
            bit = stat.S_IXGRP
        else:
            bit = stat.S_IXOTH
        if not info.st_mode & bit:
            return directory
    return None
