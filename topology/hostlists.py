"""Slurm hostlist expressions ("n[1-4,7]", "gpu[001-128]") expanded and collected.

Thin wrapper over the python-hostlist library that turns its errors into one-line
UserInputErrors naming where the expression came from.
"""

from __future__ import annotations

from collections.abc import Iterable

import hostlist

from launcher.errors import UserInputError


def expand(expression: str, where: str = "hostlist") -> list[str]:
    """Expand a Slurm hostlist expression into host names, in order, keeping duplicates."""
    if any(ch.isspace() or not ch.isprintable() for ch in expression):
        raise UserInputError(f"{where}: bad hostlist {expression!r} (expected host names "
                             "without blanks or control characters)")
    try:
        names: list[str] = hostlist.expand_hostlist(expression, allow_duplicates=True)
    except hostlist.BadHostlist as err:
        raise UserInputError(f"{where}: bad hostlist {expression!r} ({err})") from None
    return names


def collect(names: Iterable[str], where: str = "hostlist") -> str:
    """Compress host names into the shortest hostlist expression Slurm accepts."""
    try:
        result: str = hostlist.collect_hostlist(list(names))
    except hostlist.BadHostlist as err:
        raise UserInputError(f"{where}: cannot write these names as a hostlist ({err})") from None
    return result
