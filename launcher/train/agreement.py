"""Errors agreed across the ranks of `gantry train`: when a rank fails a step that every rank
takes (a set-up step, a checkpoint write), every rank raises, so all stop together and only
rank 0 reports.

:func:`agree` is the collective (one allgather of each rank's error or None); :func:`agreed`
wraps a block of work in it. Rank 0 raises the first failed rank's message (as a
UserInputError for exit status 2, else a GantryError); the other ranks raise QuietFailure
with the same exit status, which `gantry train` returns without printing anything.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from launcher.errors import GantryError, UserInputError


class QuietFailure(GantryError):
    """Raised on ranks other than 0 when rank 0 reports the error."""


def agree(world: Any, error: GantryError | None) -> None:
    """Collective: if any rank failed, every rank raises (rank 0 with the first message)."""
    errors = world.allgather(None if error is None else (type(error).__name__, str(error),
                                                         error.exit_status))
    failed = [e for e in errors if e is not None]
    if not failed:
        return
    _kind, message, status = failed[0]
    err: GantryError = UserInputError(message) if status == 2 else GantryError(message)
    if world.Get_rank() != 0:
        quiet = QuietFailure(message)
        quiet.exit_status = status
        raise quiet
    raise err


@contextmanager
def agreed(world: Any) -> Iterator[None]:
    """Collective: runs the block, then :func:`agree` on the GantryError it raised on this
    rank (or on None when it finished). Any other exception leaves at once, unagreed. The
    block must make no collective call (a rank that fails part-way would miss it)."""
    error: GantryError | None = None
    try:
        yield
    except GantryError as err:
        error = err
    agree(world, error)
