"""External tools and system roots for preflight, each overridable by environment.

Real sites put tools in odd places and tests inject faults through the same doors users
get: ``GANTRY_NVIDIA_SMI``, ``GANTRY_DMESG``, ``GANTRY_SCONTROL``, ``GANTRY_SRUN``,
``GANTRY_MPIRUN``, ``GANTRY_SYSFS_ROOT`` (root for /sys) and ``GANTRY_PROC_ROOT`` (root for
/proc). :func:`run_tool` is the one place preflight runs a subprocess: no shell, a watchdog
timeout that kills the whole process group (a hung tool is reported, never waited on).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

TOOL_ENV = {
    "nvidia-smi": "GANTRY_NVIDIA_SMI",
    "dmesg": "GANTRY_DMESG",
    "scontrol": "GANTRY_SCONTROL",
    "srun": "GANTRY_SRUN",
    "mpirun": "GANTRY_MPIRUN",
}
"""Tool name -> environment variable that overrides its path."""


def tool_path(name: str, env: Mapping[str, str] | None = None) -> str | None:
    """The executable for ``name``: the env override if set, else PATH lookup, else None."""
    environ = os.environ if env is None else env
    override = environ.get(TOOL_ENV.get(name, ""), "")
    if override:
        return override
    return shutil.which(name)


def tool_overridden(name: str, env: Mapping[str, str] | None = None) -> bool:
    """True when the user pointed ``name`` somewhere explicitly."""
    environ = os.environ if env is None else env
    return bool(environ.get(TOOL_ENV.get(name, ""), ""))


def sysfs_root(env: Mapping[str, str] | None = None) -> Path:
    """Root of the sysfs tree (``GANTRY_SYSFS_ROOT``, default /sys). Under an override, a
    subdirectory named after ``$SLURMD_NODENAME`` wins when present, so one node of a test
    cluster can carry a fault (as with the fake nvidia-smi's fixture directory)."""
    environ = os.environ if env is None else env
    override = environ.get("GANTRY_SYSFS_ROOT")
    if not override:
        return Path("/sys")
    node = environ.get("SLURMD_NODENAME", "")
    if node and "/" not in node and (Path(override) / node).is_dir():
        return Path(override) / node
    return Path(override)


def proc_root(env: Mapping[str, str] | None = None) -> Path:
    """Root of the procfs tree (``GANTRY_PROC_ROOT``, default /proc)."""
    environ = os.environ if env is None else env
    return Path(environ.get("GANTRY_PROC_ROOT") or "/proc")


@dataclass(frozen=True)
class ToolOutput:
    """What one external command did."""

    argv: tuple[str, ...]
    """The command as run."""
    returncode: int | None
    """Exit status; None when it was killed by the watchdog or could not start."""
    stdout: str
    """Standard output (decoded, errors replaced)."""
    stderr: str
    """Standard error (decoded, errors replaced)."""
    duration_s: float
    """Wall time until it exited or was killed."""
    timed_out: bool = False
    """True when the watchdog killed it."""
    start_error: str | None = None
    """Why it could not be started (missing, not executable), else None."""

    @property
    def ok(self) -> bool:
        return self.returncode == 0 and not self.timed_out and self.start_error is None

    def describe_failure(self) -> str:
        """One line saying why the command gave no usable output."""
        name = self.argv[0] if self.argv else "?"
        if self.start_error is not None:
            return f"{name}: {self.start_error}"
        if self.timed_out:
            return f"{name} did not answer within {self.duration_s:.1f} s (killed)"
        tail = (self.stderr.strip().splitlines() or [""])[-1][:200]
        return f"{name} exited with status {self.returncode}" + (f": {tail}" if tail else "")


def run_tool(
    argv: Sequence[str], timeout_s: float, env: Mapping[str, str] | None = None
) -> ToolOutput:
    """Run ``argv`` (no shell) with a watchdog; on timeout kill its whole process group."""
    args = tuple(argv)
    start = time.monotonic()
    try:
        proc = subprocess.Popen(
            args,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
            env=None if env is None else dict(env),
        )
    except OSError as err:
        return ToolOutput(args, None, "", "", time.monotonic() - start, False, err.strerror)
    try:
        out, err_bytes = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        out, err_bytes = proc.communicate()
        return ToolOutput(
            args,
            None,
            out.decode(errors="replace"),
            err_bytes.decode(errors="replace"),
            time.monotonic() - start,
            timed_out=True,
        )
    return ToolOutput(
        args,
        proc.returncode,
        out.decode(errors="replace"),
        err_bytes.decode(errors="replace"),
        time.monotonic() - start,
    )
