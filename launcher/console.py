"""Terminal output: rich when attached to a terminal, plain text when piped; JSON output."""

from __future__ import annotations

import json
import math
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # rich loads with the first console (commands that only parse never do)
    from rich.console import Console


def make_console(stderr: bool = False) -> Console:
    """A rich Console that degrades to plain text (no colour, no boxes) when not a TTY. Its
    markup is off: what gantry prints holds node names, tool output and paths ("[drm] ...",
    "[/dev/nvidia0]") that rich would take for style tags, or refuse as unmatched ones;
    styled text is given as rich Text."""
    from rich.console import Console

    stream = sys.stderr if stderr else sys.stdout
    is_tty = stream.isatty()
    return Console(
        file=stream,
        force_terminal=is_tty,
        no_color=not is_tty,
        highlight=False,
        markup=False,
        soft_wrap=not is_tty,
        width=None if is_tty else 200,
    )


def _strict(data: Any) -> Any:
    """``data`` with NaN and infinities as None: JSON has no such numbers (a run whose loss
    went NaN must still print JSON every parser reads)."""
    if isinstance(data, float) and not math.isfinite(data):
        return None
    if isinstance(data, dict):
        return {key: _strict(value) for key, value in data.items()}
    if isinstance(data, list | tuple):
        return [_strict(value) for value in data]
    return data


def print_json(data: Any) -> None:
    """Write ``data`` as indented, strict JSON on stdout (for ``--json`` read commands)."""
    json.dump(_strict(data), sys.stdout, indent=2, sort_keys=True, default=str,
              allow_nan=False)
    sys.stdout.write("\n")


def text_table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """Left-aligned columns two spaces apart, a header line first, one line per row (plain
    text, no library: for commands that must start fast, like `gantry status`)."""
    lines = [list(header), *(list(row) for row in rows)]
    widths = [max(len(line[i]) for line in lines) for i in range(len(header))]
    return "".join("  ".join(cell.ljust(width) for cell, width in zip(line, widths,
                                                                      strict=True)).rstrip()
                   + "\n" for line in lines)
