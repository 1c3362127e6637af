"""Whole numbers read from text (topology files, Slurm's output, srun labels, directory names):
ASCII digits only, and few enough of them for int().

``str.isdigit()`` is true for "²" and "٣", which ``int()`` refuses or reads as 3, and ``int()``
refuses a string of more than 4,300 digits (ValueError "Exceeds the limit"): a reader that
checks with this module first never meets either.
"""

from __future__ import annotations

MAX_DIGITS = 18
"""Most digits a count, size or id in gantry's inputs may have (any such number fits int64)."""


def is_whole(text: str, max_digits: int = MAX_DIGITS) -> bool:
    """True when ``text`` is 1 to ``max_digits`` ASCII digits (no sign, no blanks)."""
    return 0 < len(text) <= max_digits and text.isascii() and text.isdigit()


def read_whole(text: str, max_digits: int = MAX_DIGITS) -> int | None:
    """``text`` as a non-negative integer when :func:`is_whole`, else None."""
    return int(text) if is_whole(text, max_digits) else None
