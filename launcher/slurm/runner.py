"""The one place gantry runs Slurm commands: argv lists only, timeouts, backoff on transient errors.

Every Slurm client call goes through :class:`CommandRunner.run`, so tests and benchmarks can
swap or observe it (submitit's pattern). Tool paths can be redirected with
``GANTRY_SLURM_BIN_DIR`` (a directory holding ``sbatch``, ``squeue``, ...); ``SLURM_CONF`` and
the rest of the environment are inherited unless an explicit ``env`` is given.
"""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from launcher.errors import GantryError

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


@dataclass(frozen=True)
class CommandResult:
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
    """The path to run for Slurm tool ``name`` ($GANTRY_SLURM_BIN_DIR/name, else PATH)."""
    source = os.environ if env is None else env
    bin_dir = source.get("GANTRY_SLURM_BIN_DIR")
    return str(Path(bin_dir) / name) if bin_dir else name


@dataclass
class CommandRunner:
    """Runs Slurm commands with a timeout and exponential backoff on transient errors."""

    timeout_s: float = 30.0
    """Per-attempt wall-clock limit."""
    retries: int = 4
    """Extra attempts after a transient error (so at most retries + 1 runs)."""
    backoff_s: float = 0.5
    """First wait between attempts; doubles each time."""
    max_backoff_s: float = 8.0
    """Longest wait between attempts."""
    env: Mapping[str, str] | None = None
    """Environment for the commands (None: inherit, including SLURM_CONF)."""
    sleep: Callable[[float], None] = field(default=time.sleep, repr=False)
    """How to wait between attempts (swappable for tests of the schedule)."""
    log: list[CommandResult] = field(default_factory=list, repr=False)
    """Every finished command, in order (for debugging and benchmarks)."""

    def run(self, argv: Sequence[str], *, check: bool = True, stdin: str | None = None,
            timeout_s: float | None = None) -> CommandResult:
        """Run ``argv`` (argv[0] a Slurm tool name); retry on transient errors; raise on failure."""
        if isinstance(argv, str):
            raise TypeError("CommandRunner.run takes an argv list, never a string")
        full = (resolve_tool(argv[0], self.env), *argv[1:])
        delay = self.backoff_s
        attempt = 0
        while True:
            attempt += 1
            try:
                proc = subprocess.run(
                    full, input=stdin, capture_output=True, text=True, encoding="utf-8",
                    errors="replace", check=False,
                    timeout=timeout_s or self.timeout_s,
                    env=None if self.env is None else dict(self.env),
                )
            except FileNotFoundError:
                raise SlurmCommandError(full, f"{full[0]} not found (is Slurm installed? "
                                        "GANTRY_SLURM_BIN_DIR overrides the tool directory)"
                                        ) from None
            except subprocess.TimeoutExpired:
                if attempt <= self.retries:
                    self.sleep(delay)
                    delay = min(delay * 2, self.max_backoff_s)
                    continue
                raise SlurmCommandError(
                    full, f"timed out after {timeout_s or self.timeout_s:g}s "
                    f"({attempt} attempts)") from None
            result = CommandResult(full, proc.returncode, proc.stdout, proc.stderr, attempt)
            if proc.returncode != 0 and is_transient(proc.stderr) and attempt <= self.retries:
                self.sleep(delay)
                delay = min(delay * 2, self.max_backoff_s)
                continue
            self.log.append(result)
            if check and proc.returncode != 0:
                detail = first_line(proc.stderr) or first_line(proc.stdout) or "no output"
                raise SlurmCommandError(
                    full, f"exit {proc.returncode}: {detail}", proc.returncode, proc.stderr
                )
            return result
