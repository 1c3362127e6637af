"""The error kinds every gantry package raises, the exit statuses they map to, and how a
message quotes the value it refuses.

They sit at the bottom of the layers (docs/architecture.md), below launcher/: a GantryError
is reported by the `gantry` command as one ``error: ...`` line (exit 1), a UserInputError
(bad input) exits 2. The topology library raises its own kinds, TopologyError and
TopologyInputError, which are GantryErrors too: every handler of gantry's errors handles
them. launcher/errors.py names these for launcher's modules.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

EXIT_OK = 0
EXIT_FAILURE = 1
EXIT_BAD_INPUT = 2


def shown(value: str) -> str:
    """``value`` for a one-line message: as it is when printable, else its repr (line breaks
    and control characters escaped)."""
    return value if value.isprintable() else repr(value)


BRIEF_LIMIT = 80
"""Longest value an error message quotes whole; a longer one is cut (a whole file read as one
YAML string must not become a kilobyte-long error line)."""


def brief(value: object, limit: int = BRIEF_LIMIT) -> str:
    """``repr(value)`` for a one-line message, cut to about ``limit`` characters with the
    length said: ``'root:x:0:0:...' (1432 characters)``. Only about ``limit`` characters are
    ever written: a value of 9^9 items (YAML aliases) costs no more than a short one."""
    text, whole = _cut_repr(value, limit + 1)
    if whole and len(text) <= limit:
        return text
    if isinstance(value, str):
        size = f"{len(value)} characters"
    elif isinstance(value, bytes | bytearray):
        size = f"{len(value)} bytes"
    elif isinstance(value, list | tuple | dict | set | frozenset):
        size = f"{len(value)} items"
    else:
        size = f"{len(text)} characters"
    return f"{text[:limit - 3]}... ({size})"


def _digits(value: int) -> int:
    return max(1, int(abs(value).bit_length() * 0.30103) + 1)


def _cut_repr(value: object, budget: int) -> tuple[str, bool]:
    """The first ``budget``-odd characters of ``repr(value)`` and whether that is all of it;
    containers are walked only as far as the budget reaches (a self-containing list ends)."""
    parts: list[str] = []
    left = budget

    def emit(text: str) -> None:
        nonlocal left
        parts.append(text)
        left -= len(text)

    def items(values: Iterable[Any], opening: str, closing: str, pairs: bool) -> bool:
        emit(opening)
        count = 0
        for item in values:
            if left <= 0:
                return False
            if count:
                emit(", ")
            if pairs:
                key, val = item
                if not walk(key):
                    return False
                emit(": ")
                item = val
            if not walk(item):
                return False
            count += 1
        if opening == "(" and count == 1:
            emit(",")
        emit(closing)
        return True

    def walk(item: object) -> bool:
        if left <= 0:
            return False
        if isinstance(item, str | bytes | bytearray) and len(item) > left:
            emit(repr(item[:left + 1]))  # longer than what is left: the cut is inside it
            return False
        if isinstance(item, list):
            return items(item, "[", "]", pairs=False)
        if isinstance(item, tuple):
            return items(item, "(", ")", pairs=False)
        if isinstance(item, dict):
            return items(item.items(), "{", "}", pairs=True)
        if isinstance(item, set) and item:
            return items(item, "{", "}", pairs=False)
        if isinstance(item, frozenset) and item:
            return items(item, "frozenset({", "})", pairs=False)
        try:
            emit(repr(item))
        except ValueError:  # an integer of more digits than Python writes (4,300)
            if not isinstance(item, int):
                raise
            emit(f"<an integer of about {_digits(item)} digits>")
        return True

    whole = walk(value)
    return "".join(parts), whole


class GantryError(Exception):
    """A failure that is reported as one `error: ...` line (exit 1), never a traceback."""

    exit_status = EXIT_FAILURE


class UserInputError(GantryError):
    """Bad input from the user (file, field, flag, value): exit 2, nothing started or changed.

    The message names where the value came from and what is allowed, e.g.
    ``site_configs/x.yaml: nodes.count: 0 is not allowed (expected an integer >= 1)``.
    """

    exit_status = EXIT_BAD_INPUT


class TopologyError(GantryError):
    """A failure of the topology library (e.g. no placement satisfies the request): exit 1."""


class TopologyInputError(TopologyError, UserInputError):
    """Bad topology input (a topology file, a hostlist, a placement request): exit 2, with
    the file, field or value named as a UserInputError does."""


class FieldError(ValueError):
    """A validation failure at a field path (relative to the dataclass that raised it).

    A typed-config dataclass's ``validate()`` raises it; launcher/typed_config.py adds the
    file and the path of the dataclass and raises a UserInputError.
    """

    def __init__(self, path: str, message: str) -> None:
        super().__init__(f"{path}: {message}" if path else message)
        self.path = path
        self.message = message


def tag_problem(err: Exception) -> str:
    """What a failed YAML tag constructor says, as words (ValueError's text, else generic)."""
    if isinstance(err, ValueError | OverflowError) and str(err):
        return str(err)
    return "not a value of this tag"
