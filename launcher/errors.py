"""The two error kinds gantry reports to users, and the exit statuses they map to."""

from __future__ import annotations

EXIT_OK = 0
EXIT_FAILURE = 1
EXIT_BAD_INPUT = 2


def shown(value: str) -> str:
    """``value`` for a one-line message: as it is when printable, else its repr (line breaks
    and control characters escaped)."""
    return value if value.isprintable() else repr(value)


class GantryError(Exception):
    """A failure that is reported as one `error: ...` line (exit 1), never a traceback."""

    exit_status = EXIT_FAILURE


class UserInputError(GantryError):
    """Bad input from the user (file, field, flag, value): exit 2, nothing started or changed.

    The message names where the value came from and what is allowed, e.g.
    ``site_configs/x.yaml: nodes.count: 0 is not allowed (expected an integer >= 1)``.
    """

    exit_status = EXIT_BAD_INPUT
