"""The preflight levels, cheapest first (their own module: the parsers of several commands
offer them as choices at start-up)."""

from __future__ import annotations

from typing import Literal

Level = Literal["quick", "standard", "deep"]
LEVELS: tuple[Level, ...] = ("quick", "standard", "deep")
