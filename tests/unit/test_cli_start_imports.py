"""`gantry --help` and `gantry status` start without loading what they do not use.

Registration imports only what argparse needs, each handler imports its own work (numpy,
jinja2, torch, mpi4py, safetensors, matplotlib load when a command runs, not when the CLI
starts); `gantry --help` and `gantry status` load no PyYAML, rich, dataclasses (inspect), job
schema, site config or Slurm client. A known command builds only its own parser; the job
commands' override options are added when their parser is first used. Structural, not
timed: the start-up time itself is bench/bench_cli_start.py's."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
HEAVY = ("numpy", "jinja2", "torch", "mpi4py", "safetensors", "matplotlib")
NOT_AT_START = (*HEAVY, "yaml", "rich", "dataclasses", "inspect", "launcher.job_spec",
                "launcher.job_request", "launcher.job_overrides", "launcher.job_placement",
                "launcher.site_config", "launcher.slurm", "launcher.typed_config")
"""Modules neither `gantry --help` nor `gantry status` (no job yet) may load."""


def loaded_by(argv: list[str], cwd: Path) -> tuple[list[str], str]:
    """(every module `gantry ARGV` loaded, its standard output), from a fresh interpreter."""
    code = ("import contextlib, io, json, sys\n"
            "from launcher.cli import main\n"
            "out = io.StringIO()\n"
            "with contextlib.redirect_stdout(out):\n"
            f"    status = main({argv!r})\n"
            "print(json.dumps([status, sorted(sys.modules), out.getvalue()]))\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          cwd=REPO, check=True, timeout=60,
                          env={"PATH": "/usr/bin:/bin", "GANTRY_JOBS_DIR": str(cwd / "jobs")})
    status, modules, out = json.loads(done.stdout)
    assert status == 0, done.stderr
    return modules, out


def test_building_the_parser_imports_no_heavy_library() -> None:
    code = ("import json, sys\n"
            "from launcher.cli import build_parser\n"
            "build_parser().format_help()\n"
            f"print(json.dumps(sorted(m for m in {HEAVY!r} if m in sys.modules)))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         cwd=REPO, check=True, timeout=60)
    assert json.loads(out.stdout) == []


def test_help_and_status_load_only_what_they_use(tmp_path: Path) -> None:
    for argv in (["status"], ["status", "--json"], ["status", "--state", "X"]):
        modules, out = loaded_by(argv, tmp_path)
        assert sorted(set(NOT_AT_START) & set(modules)) == [], argv
        assert not any(m.startswith("launcher.commands.") and m != "launcher.commands.status"
                       for m in modules), argv  # only the status command was registered
        assert out.startswith(("no jobs under", "[]")), out
    code = ("import json, sys\n"
            "from launcher.cli import build_parser\n"
            "text = build_parser().format_help()\n"
            "print(json.dumps([text, sorted(sys.modules)]))\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          cwd=REPO, check=True, timeout=60)
    text, modules = json.loads(done.stdout)
    assert "submit" in text and "status" in text
    assert sorted(set(NOT_AT_START) & set(modules)) == []


def test_a_job_commands_overrides_are_there_when_it_is_used() -> None:
    from launcher.cli import build_parser, parser_for
    from launcher.job_overrides import CliOverrides

    for parser in (build_parser(), parser_for(["submit"]), parser_for(["render"])):
        choices: dict[str, argparse.ArgumentParser] = next(
            a.choices for a in parser._actions if isinstance(a, argparse._SubParsersAction))
        for command in ("submit", "render"):
            if command in choices:
                text = choices[command].format_help()
                assert all(flag.flag in text for _, flag in CliOverrides.flags()), command
    args = parser_for(["submit", "job.yaml", "--nodes", "3", "-t", "10"]).parse_args(
        ["submit", "job.yaml", "--nodes", "3", "-t", "10"])
    assert (args.nodes, args.time_limit, args.passthrough) == (3, "10", [])
