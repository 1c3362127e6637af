"""The two error kinds gantry reports to users, and the exit statuses they map to."""

from __future__ import annotations

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
    length said: ``'root:x:0:0:...' (1432 characters)``."""
    text = repr(value)
    if len(text) <= limit:
        return text
    if isinstance(value, str):
        size = f"{len(value)} characters"
    elif isinstance(value, list | tuple | dict):
        size = f"{len(value)} items"
    else:
        size = f"{len(text)} characters"
    return f"{text[:limit - 3]}... ({size})"


class GantryError(Exception):
    """A failure that is reported as one `error: ...` line (exit 1), never a traceback."""

    exit_status = EXIT_FAILURE


class UserInputError(GantryError):
    """Bad input from the user (file, field, flag, value): exit 2, nothing started or changed.

    The message names where the value came from and what is allowed, e.g.
    ``site_configs/x.yaml: nodes.count: 0 is not allowed (expected an integer >= 1)``.
    """

    exit_status = EXIT_BAD_INPUT
