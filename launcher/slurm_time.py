"""Slurm's time-limit formats, read exactly as sbatch reads ``--time`` (parse_time.c).

``MM``, ``MM:SS``, ``HH:MM:SS``, ``D-HH``, ``D-HH:MM``, ``D-HH:MM:SS``: a lone number is
minutes and two numbers are minutes:seconds (``00:30`` is 30 seconds), three are
hours:minutes:seconds; with a day count, the numbers after it are hours[:minutes[:seconds]].
Slurm does not bound the fields (``90`` minutes, ``0:90`` = 90 seconds) and rounds seconds
up to whole minutes.
"""

from __future__ import annotations

import re

_TIME = re.compile(r"(?:(\d+)-(\d+)(?::(\d+)(?::(\d+))?)?|(\d+)(?::(\d+)(?::(\d+))?)?)",
                   re.ASCII)

FORMATS = "MM, MM:SS, HH:MM:SS, D-HH, D-HH:MM or D-HH:MM:SS"
"""Slurm's time-limit formats, for error messages."""

MAX_SECONDS = 2**31 - 1
"""Slurm reads a limit into a C int of seconds: a longer one overflows."""


def time_limit_seconds(text: str) -> int | None:
    """The limit ``text`` gives in seconds, as Slurm reads it; None when it is none of
    :data:`FORMATS` or is zero (Slurm's "no limit") or longer than :data:`MAX_SECONDS`."""
    match = _TIME.fullmatch(text)
    if match is None:
        return None
    d, dh, dm, ds, a, b, c = (int(g) if g is not None else None for g in match.groups())
    if d is not None:
        seconds = d * 86400 + (dh or 0) * 3600 + (dm or 0) * 60 + (ds or 0)
    elif c is not None:  # HH:MM:SS
        seconds = (a or 0) * 3600 + (b or 0) * 60 + c
    else:  # MM[:SS]
        seconds = (a or 0) * 60 + (b or 0)
    return seconds if 0 < seconds <= MAX_SECONDS else None


def time_limit_minutes(text: str) -> int | None:
    """The limit in whole minutes, as Slurm keeps it (seconds rounded up)."""
    seconds = time_limit_seconds(text)
    return None if seconds is None else -(-seconds // 60)
