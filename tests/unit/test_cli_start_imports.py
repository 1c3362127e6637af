"""`gantry --help` and the parser of every subcommand load no heavy library: registration
imports only what argparse needs, each handler imports its own work (numpy, jinja2, torch,
mpi4py, safetensors, matplotlib load when a command runs, not when the CLI starts).
Structural, not timed: the start-up time itself is bench/bench_cli_start.py's."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
HEAVY = ("numpy", "jinja2", "torch", "mpi4py", "safetensors", "matplotlib")


def test_building_the_parser_imports_no_heavy_library() -> None:
    code = ("import json, sys\n"
            "from launcher.cli import build_parser\n"
            "build_parser().format_help()\n"
            f"print(json.dumps(sorted(m for m in {HEAVY!r} if m in sys.modules)))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         cwd=REPO, check=True, timeout=60)
    assert json.loads(out.stdout) == []
