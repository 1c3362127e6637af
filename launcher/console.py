"""Terminal output: rich when attached to a terminal, plain text when piped; JSON output."""

from __future__ import annotations

import json
import sys
from typing import Any

from rich.console import Console


def make_console(stderr: bool = False) -> Console:
    """A rich Console that degrades to plain text (no colour, no boxes) when not a TTY."""
    stream = sys.stderr if stderr else sys.stdout
    is_tty = stream.isatty()
    return Console(
        file=stream,
        force_terminal=is_tty,
        no_color=not is_tty,
        highlight=False,
        soft_wrap=not is_tty,
        width=None if is_tty else 200,
    )


def print_json(data: Any) -> None:
    """Write ``data`` as indented JSON on stdout (for ``--json`` read commands)."""
    json.dump(data, sys.stdout, indent=2, sort_keys=True, default=str)
    sys.stdout.write("\n")
