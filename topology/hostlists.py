"""Slurm hostlist expressions ("n[1-4,7]", "gpu[001-128]") expanded and collected.

Thin wrapper over the python-hostlist library that turns its errors into one-line
UserInputErrors naming where the expression came from.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

import hostlist

from topology.errors import TopologyInputError, brief


class HostlistError(TopologyInputError):
    """A bad hostlist: ``where: problem``; ``problem`` alone for a caller that names the place
    itself (a config field, whose error names the file)."""

    def __init__(self, where: str, problem: str) -> None:
        super().__init__(f"{where}: {problem}")
        self.problem = problem


MAX_NUMBER_DIGITS = 64
"""Most digits of one number in a hostlist: a host name has at most 64 characters (Linux's
HOST_NAME_MAX). A longer number is refused before the library's int() (which refuses more
than 4,300 digits with a ValueError) sees it."""

_LONG_NUMBER = re.compile(rf"[0-9]{{{MAX_NUMBER_DIGITS + 1},}}")


def _long_number(text: str) -> str | None:
    """Why ``text`` holds a number too long for a host name, else None."""
    found = _LONG_NUMBER.search(text)
    if found is None:
        return None
    return (f"a number of {len(found.group(0))} digits; expected at most {MAX_NUMBER_DIGITS}, "
            "as a host name has at most 64 characters")


def expand(expression: str, where: str = "hostlist") -> list[str]:
    """Expand a Slurm hostlist expression into host names, in order, keeping duplicates."""
    if any(ch.isspace() or not ch.isprintable() for ch in expression):
        raise HostlistError(where, f"bad hostlist {brief(expression)} (expected host names "
                            "without blanks or control characters)")
    too_long = _long_number(expression)
    if too_long is not None:
        raise HostlistError(where, f"bad hostlist {brief(expression)} ({too_long})")
    try:
        names: list[str] = hostlist.expand_hostlist(expression, allow_duplicates=True)
    except hostlist.BadHostlist as err:
        raise HostlistError(where, f"bad hostlist {brief(expression)} ({err})") from None
    return names


def collect(names: Iterable[str], where: str = "hostlist") -> str:
    """Compress host names into the shortest hostlist expression Slurm accepts."""
    listed = list(names)
    too_long = _long_number(",".join(listed))
    if too_long is not None:
        raise TopologyInputError(f"{where}: cannot write these names as a hostlist ({too_long})")
    try:
        result: str = hostlist.collect_hostlist(listed)
    except hostlist.BadHostlist as err:
        raise TopologyInputError(
            f"{where}: cannot write these names as a hostlist ({err})"
        ) from None
    return result
