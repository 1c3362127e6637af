"""gantry's own Slurm drain reasons: the one prefix, how one is spelled, how one is told apart.

A reason is gantry's only when it is exactly one that gantry writes: :data:`DRAIN_PREFIX`
(``gantry:``, spelled here only) then words of ``[A-Za-z0-9._/+=@%-]`` joined by ``:``,
optionally `` (+N more)``, at most :data:`MAX_REASON_CHARS` characters. Anything else, a
leading blank or ``gantry: PSU swap`` included, is an operator's reason that gantry never
overwrites nor lifts.
"""

from __future__ import annotations

import re

DRAIN_PREFIX = "gantry:"
"""Every reason gantry sets starts with this."""

MAX_REASON_CHARS = 256
"""Longest reason gantry writes (check id and detail are cut to 64 characters each)."""

_WORD = r"[A-Za-z0-9._/+=@%-]+"
_OWN_REASON = re.compile(
    rf"{re.escape(DRAIN_PREFIX)}{_WORD}(?::{_WORD})*(?: \(\+[0-9]{{1,6}} more\))?")


def is_gantry_reason(reason: str | None) -> bool:
    """True when ``reason`` is exactly a reason gantry writes (see the module docstring).

    The pattern has no nested repetition over overlapping classes, so it runs in linear
    time on any text."""
    if not reason or len(reason) > MAX_REASON_CHARS:
        return False
    return _OWN_REASON.fullmatch(reason) is not None
