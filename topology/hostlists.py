"""Slurm hostlist expressions ("n[1-4,7]", "gpu[001-128]") expanded and collected.

Thin wrapper over the python-hostlist library that turns its errors into one-line
UserInputErrors naming where the expression came from.
"""

from __future__ import annotations

from collections.abc import Iterable

import hostlist

from launcher.errors import UserInputError, brief


class HostlistError(UserInputError):
    """A bad hostlist: ``where: problem``; ``problem`` alone for a caller that names the place
    itself (a config field, whose error names the file)."""

    def __init__(self, where: str, problem: str) -> None:
        super().__init__(f"{where}: {problem}")
        self.problem = problem


def expand(expression: str, where: str = "hostlist") -> list[str]:
    """Expand a Slurm hostlist expression into host names, in order, keeping duplicates."""
    if any(ch.isspace() or not ch.isprintable() for ch in expression):
        raise HostlistError(where, f"bad hostlist {brief(expression)} (expected host names "
                            "without blanks or control characters)")
    try:
        names: list[str] = hostlist.expand_hostlist(expression, allow_duplicates=True)
    except hostlist.BadHostlist as err:
        raise HostlistError(where, f"bad hostlist {brief(expression)} ({err})") from None
    return names


def collect(names: Iterable[str], where: str = "hostlist") -> str:
    """Compress host names into the shortest hostlist expression Slurm accepts."""
    try:
        result: str = hostlist.collect_hostlist(list(names))
    except hostlist.BadHostlist as err:
        raise UserInputError(f"{where}: cannot write these names as a hostlist ({err})") from None
    return result
