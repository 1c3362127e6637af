"""The one place gantry runs Slurm's and munge's programs: argv lists only, tool paths by the
one tool rule, the bounded process runner underneath.

:func:`run_slurm` runs one command through :func:`launcher.process_runner.run_tool` (no
shell, a watchdog that kills the command's whole process group, an output cap);
:class:`CommandRunner` adds retries with backoff on transient controller errors and is what
the Slurm client calls, so tests and benchmarks can swap or observe it (submitit's pattern);
:func:`spawn_daemon` starts the embedded cluster's daemons in sessions of their own. Tool
paths follow :mod:`launcher.slurm.tools` (``GANTRY_<TOOL>``, else ``GANTRY_SLURM_BIN_DIR``,
else PATH); ``SLURM_CONF`` and the rest of the environment are inherited unless an explicit
``env`` is given. tests/unit/test_slurm_calls.py fails on a Slurm program started anywhere
else.
"""

from __future__ import annotations

import errno
import os
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import NamedTuple

from launcher.errors import GantryError
from launcher.process_runner import MAX_TOOL_OUTPUT, ToolOutput, run_tool
from launcher.slurm.tools import how_to_point_at, tool_path

#: Substrings of Slurm error output that mean "try again": the controller is busy or restarting.
TRANSIENT_ERRORS: tuple[str, ...] = (
    "Socket timed out",
    "Unable to contact slurm controller",
    "Slurm backup controller in standby mode",
    "Connection refused",
    "Resource temporarily unavailable",
    "Zero Bytes were transmitted or received",
    "Transport endpoint is not connected",
)


class SlurmCommandError(GantryError):
    """A Slurm command failed (non-zero exit, timeout, or missing tool)."""

    def __init__(self, argv: Sequence[str], message: str, returncode: int | None = None,
                 stderr: str = "") -> None:
        super().__init__(f"{' '.join(argv[:2])}: {message}")
        self.argv = tuple(argv)
        self.returncode = returncode
        self.stderr = stderr


class CommandResult(NamedTuple):
    """What one command printed and how it ended."""

    argv: tuple[str, ...]
    """The argv that ran (tool path resolved)."""
    returncode: int
    """Exit status."""
    stdout: str
    """Standard output, decoded as UTF-8."""
    stderr: str
    """Standard error, decoded as UTF-8."""
    attempts: int = 1
    """How many times it ran (more than 1 after transient errors)."""


def first_line(text: str) -> str:
    """The first non-empty line of ``text`` (for one-line error messages)."""
    for line in text.splitlines():
        if line.strip():
            return line.strip()
    return ""


def is_transient(stderr: str) -> bool:
    """True when ``stderr`` says the controller was unreachable or timed out."""
    return any(marker in stderr for marker in TRANSIENT_ERRORS)


def resolve_tool(name: str, env: Mapping[str, str] | None = None) -> str:
    """The path to run for tool ``name`` (the tool rule); ``name`` itself when nothing is
    found, so that running it reports it missing. A path (with ``/``) stays as it is."""
    if "/" in name:
        return name
    return tool_path(name, env) or name


def run_slurm(argv: Sequence[str], timeout_s: float,
              env: Mapping[str, str] | None = None) -> ToolOutput:
    """Run ``argv`` once: argv[0] a tool name (found by the tool rule) or a path. No shell;
    on timeout or too much output its whole process group is killed; a tool that cannot
    start is reported in the result, never raised."""
    if isinstance(argv, str):
        raise TypeError("run_slurm takes an argv list, never a string")
    if not argv:
        raise ValueError("run_slurm: empty argv")
    return run_tool((resolve_tool(argv[0], env), *argv[1:]), timeout_s, env)


def spawn_daemon(argv: Sequence[str], output: Path, env: Mapping[str, str], cwd: Path,
                 user: str | None = None, group: int | None = None) -> subprocess.Popen[bytes]:
    """Start daemon ``argv`` exactly as given (argv[0] as :func:`launcher.slurm.tools.
    require_tool` found it: the daemon's pid record keeps this argv to recognise it) in a
    session of its own, so that stopping it can kill the whole group; stdout and stderr
    appended to ``output``."""
    if isinstance(argv, str):
        raise TypeError("spawn_daemon takes an argv list, never a string")
    with output.open("ab") as out:
        return subprocess.Popen(
            list(argv),
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            cwd=cwd,
            env=dict(env),
            start_new_session=True,
            user=user,
            group=group,
            extra_groups=[] if user is not None else None,
        )


def signal_job_steps(job_id: str, signal_name: str) -> None:
    """Send ``signal_name`` to every step of job ``job_id`` but not its batch shell
    (``scancel --signal``, no --batch); raises SlurmCommandError when scancel fails."""
    CommandRunner(timeout_s=10.0, retries=1).run(["scancel", f"--signal={signal_name}", job_id])


class CommandRunner:
    """Runs Slurm commands with a timeout and exponential backoff on transient errors.

    - ``timeout_s``: per-attempt wall-clock limit;
    - ``retries``: extra attempts after a transient error (so at most retries + 1 runs);
    - ``backoff_s``: first wait between attempts, doubling each time up to ``max_backoff_s``;
    - ``env``: environment for the commands (None: inherit, including SLURM_CONF);
    - ``sleep``: how to wait between attempts (swappable for tests of the schedule);
    - ``log``: every finished command, in order (for debugging and benchmarks).
    """

    def __init__(self, *, timeout_s: float = 30.0, retries: int = 4, backoff_s: float = 0.5,
                 max_backoff_s: float = 8.0, env: Mapping[str, str] | None = None,
                 sleep: Callable[[float], None] = time.sleep) -> None:
        self.timeout_s = timeout_s
        self.retries = retries
        self.backoff_s = backoff_s
        self.max_backoff_s = max_backoff_s
        self.env = env
        self.sleep = sleep
        self.log: list[CommandResult] = []

    def __repr__(self) -> str:
        return (f"CommandRunner(timeout_s={self.timeout_s}, retries={self.retries}, "
                f"backoff_s={self.backoff_s}, max_backoff_s={self.max_backoff_s}, "
                f"env={'inherited' if self.env is None else 'given'})")

    def run(self, argv: Sequence[str], *, check: bool = True,
            timeout_s: float | None = None) -> CommandResult:
        """Run ``argv`` (argv[0] a Slurm tool name); retry on transient errors; raise on failure."""
        if isinstance(argv, str):
            raise TypeError("CommandRunner.run takes an argv list, never a string")
        full = (resolve_tool(argv[0], self.env), *argv[1:])
        limit = timeout_s or self.timeout_s
        delay = self.backoff_s
        attempt = 0
        while True:
            attempt += 1
            out = run_slurm(full, limit, self.env)
            if out.start_error is not None:
                if out.start_error == os.strerror(errno.ENOENT):
                    raise SlurmCommandError(full, f"{full[0]} not found (is Slurm installed? "
                                            f"{how_to_point_at(Path(argv[0]).name)})")
                raise SlurmCommandError(full, f"cannot run {full[0]}: {out.start_error}")
            if out.too_much:
                raise SlurmCommandError(full, f"printed more than {MAX_TOOL_OUTPUT} bytes "
                                        "(killed)")
            if out.timed_out:
                if attempt <= self.retries:
                    self.sleep(delay)
                    delay = min(delay * 2, self.max_backoff_s)
                    continue
                raise SlurmCommandError(full, f"timed out after {limit:g}s ({attempt} attempts)")
            returncode = out.returncode if out.returncode is not None else -1
            result = CommandResult(full, returncode, out.stdout, out.stderr, attempt)
            if returncode != 0 and is_transient(out.stderr) and attempt <= self.retries:
                self.sleep(delay)
                delay = min(delay * 2, self.max_backoff_s)
                continue
            self.log.append(result)
            if check and returncode != 0:
                detail = first_line(out.stderr) or first_line(out.stdout) or "no output"
                raise SlurmCommandError(full, f"exit {returncode}: {detail}", returncode,
                                        out.stderr)
            return result
