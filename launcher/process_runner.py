"""The one bounded process runner: runs a command without a shell, under a watchdog that
kills its whole process group, and caps what it may print. A hung or runaway tool is
reported in a :class:`ToolOutput`, never waited on.
"""

from __future__ import annotations

import contextlib
import os
import selectors
import signal
import subprocess
import time
from collections.abc import Mapping, Sequence
from typing import NamedTuple

MAX_TOOL_OUTPUT = 256 * 1024 * 1024
"""Most bytes a tool may print (stdout and stderr together): `nvidia-smi -q -x` on 8 GPUs
prints ~1 MB; a tool printing without end is killed and its check fails."""


class ToolOutput(NamedTuple):
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
    too_much: bool = False
    """True when it was killed for printing more than MAX_TOOL_OUTPUT bytes."""

    @property
    def ok(self) -> bool:
        return (self.returncode == 0 and not self.timed_out and self.start_error is None
                and not self.too_much)

    def describe_failure(self) -> str:
        """One line saying why the command gave no usable output."""
        name = self.argv[0] if self.argv else "?"
        if self.start_error is not None:
            return f"{name}: {self.start_error}"
        if self.too_much:
            return f"{name} printed more than {MAX_TOOL_OUTPUT} bytes (killed)"
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
    deadline = start + timeout_s
    out, err_bytes, stop = _read_capped(proc, deadline)
    returncode = None
    if stop is None:  # both pipes closed: it may still run (pipes closed, or a child holds on)
        try:
            returncode = proc.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            stop = "timeout"
    if stop is not None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):  # never wait on a D-state tool
            proc.wait(timeout=5)
        return ToolOutput(args, None, out.decode(errors="replace"),
                          err_bytes.decode(errors="replace"), time.monotonic() - start,
                          timed_out=stop == "timeout", too_much=stop == "too much")
    return ToolOutput(
        args,
        returncode,
        out.decode(errors="replace"),
        err_bytes.decode(errors="replace"),
        time.monotonic() - start,
    )


def _read_capped(proc: subprocess.Popen[bytes], deadline: float
                 ) -> tuple[bytes, bytes, str | None]:
    """Both pipes until they close, the deadline passes ("timeout") or together they exceed
    MAX_TOOL_OUTPUT bytes ("too much"; a broken tool printing without end must not take the
    node's memory)."""
    assert proc.stdout is not None and proc.stderr is not None
    out_fd, err_fd = proc.stdout.fileno(), proc.stderr.fileno()
    chunks: dict[int, list[bytes]] = {out_fd: [], err_fd: []}
    total = 0
    stop: str | None = None
    with selectors.DefaultSelector() as selector:
        for pipe in (proc.stdout, proc.stderr):
            selector.register(pipe, selectors.EVENT_READ)
        while selector.get_map():
            left = deadline - time.monotonic()
            if left <= 0:
                stop = "timeout"
                break
            for key, _ in selector.select(timeout=left):
                data = os.read(key.fd, 1 << 16)
                if not data:
                    selector.unregister(key.fileobj)
                    continue
                chunks[key.fd].append(data)
                total += len(data)
            if total > MAX_TOOL_OUTPUT:
                stop = "too much"
                break
    proc.stdout.close()
    proc.stderr.close()
    return b"".join(chunks[out_fd]), b"".join(chunks[err_fd]), stop
