"""`gantry --help` and `gantry status` start without loading what they do not use.

Registration imports only what argparse needs, each handler imports its own work (numpy,
jinja2, torch, mpi4py, safetensors, matplotlib load when a command runs, not when the CLI
starts); `gantry --help` and `gantry status` load no PyYAML, rich, dataclasses (inspect), job
schema, site config, Slurm client, shutil, shlex, threading or subprocess; `gantry status JOB`
loads the Slurm client but no dataclasses, PyYAML, rich, site config, shutil, secrets or
calendar. A known command builds only its own parser; the job commands' override options are
added when their parser is first used. Structural, not timed: the start-up time itself is
bench/bench_cli_start.py's."""

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
                "launcher.site_config", "launcher.slurm", "launcher.typed_config", "shutil",
                "shlex", "threading", "subprocess")
"""Modules neither `gantry --help` nor `gantry status` (no job yet) may load."""


STATUS_OF_A_JOB_SKIPS = ("yaml", "rich", "dataclasses", "inspect", "launcher.site_config",
                         "launcher.typed_config", "launcher.job_spec", "shutil", "secrets",
                         "calendar", "datetime", *HEAVY)
"""Modules `gantry status JOB` of a running job may not load."""
FIXTURES = REPO / "tests" / "fixtures" / "slurm"


def loaded_by(argv: list[str], cwd: Path,
              env: dict[str, str] | None = None) -> tuple[list[str], str]:
    """(every module `gantry ARGV` loaded, its standard output), from a fresh interpreter."""
    code = ("import contextlib, io, json, sys\n"
            "from launcher.cli import main\n"
            "out = io.StringIO()\n"
            "with contextlib.redirect_stdout(out):\n"
            f"    status = main({argv!r})\n"
            "print(json.dumps([status, sorted(sys.modules), out.getvalue()]))\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          cwd=REPO, check=True, timeout=60,
                          env={"PATH": "/usr/bin:/bin", "GANTRY_JOBS_DIR": str(cwd / "jobs"),
                               **(env or {})})
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


def test_status_of_a_job_loads_the_slurm_client_only(tmp_path: Path) -> None:
    """A job directory as submit leaves it (meta.json with the job id, request.json with the
    recorded Slurm access), Slurm answering through a squeue stand-in that replays the JSON
    recorded from the real 22.05 (job 6 RUNNING)."""
    job = tmp_path / "jobs" / "tiny-20261203-000000-abcd"
    (job / "logs").mkdir(parents=True)
    (job / "meta.json").write_text(json.dumps({"name": "tiny", "job_id": "6"}))
    (job / "request.json").write_text(json.dumps({"slurm": {"client": "cli",
                                                            "slurm_conf": None}}))
    (job / "logs" / "slurm-6.out").write_text(
        "[gantry 2026-12-03T10:00:00Z] job 6 (restart 0 of 3) on n[1-2]\n"
        "[gantry 2026-12-03T10:00:02Z] launching 2 ranks\n")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    squeue = bin_dir / "squeue"
    squeue.write_text(f"#!/bin/sh\ncat {FIXTURES / '22.05' / 'squeue.json'}\n")
    squeue.chmod(0o755)
    modules, out = loaded_by(["status", str(job)], tmp_path,
                             {"GANTRY_SLURM_BIN_DIR": str(bin_dir)})
    assert "state      RUNNING" in out and "goodput" in out, out
    assert "launcher.slurm.cli_backend" in modules
    assert sorted(set(STATUS_OF_A_JOB_SKIPS) & set(modules)) == []


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


def test_quick_commands_leave_without_the_teardown_and_keep_their_output(
        tmp_path: Path) -> None:
    """`gantry status` (exit_at_once) flushes what it printed into a pipe and leaves with
    os._exit: an atexit hook does not run. A command without the flag (`gantry plan` of a
    bad file) exits normally: the hook runs."""
    code = ("import atexit, sys\n"
            "atexit.register(lambda: sys.stdout.write('teardown ran\\n'))\n"
            "from launcher.cli import console\n"
            "raise SystemExit(console())\n")
    jobs = str(tmp_path / "jobs")
    quick = subprocess.run([sys.executable, "-c", code, "status", "--jobs-dir", jobs],
                           capture_output=True, text=True, cwd=REPO, timeout=60, check=False)
    assert (quick.returncode, quick.stdout) == (0, f"no jobs under {jobs}\n"), quick.stderr
    slow = subprocess.run([sys.executable, "-c", code, "plan", str(tmp_path / "none.yaml")],
                          capture_output=True, text=True, cwd=REPO, timeout=60, check=False)
    assert slow.returncode == 2 and slow.stdout == "teardown ran\n", slow.stderr
