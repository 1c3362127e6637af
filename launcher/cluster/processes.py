"""Starting, recognising and stopping the daemons of an embedded cluster.

Each daemon gantry starts gets a pid record (``<run_dir>/pids/<daemon>.pid``, JSON) holding
its pid, its start time (from /proc/<pid>/stat) and its argv. A process is "ours" only
while all three still match, so a recycled pid is never signalled. Stopping sends SIGTERM,
waits, then SIGKILLs the daemon and whatever is left in the session it leads.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

from launcher.atomic_write import write_text
from launcher.cluster.layout import RunLayout
from launcher.slurm.runner import spawn_daemon


@dataclass(frozen=True)
class PidRecord:
    """What gantry wrote down about a daemon it started."""

    daemon: str
    """Daemon name: "munged", "slurmctld" or "slurmd-<node>"."""
    pid: int
    """Process id."""
    start_time: int
    """Start time in clock ticks since boot (field 22 of /proc/<pid>/stat)."""
    argv: list[str]
    """The command line it was started with."""


@dataclass(frozen=True)
class ProcStat:
    """The fields of /proc/<pid>/stat gantry needs."""

    state: str
    """R, S, D, Z, ... (Z: exited, not yet reaped)."""
    session: int
    """Session id."""
    start_time: int
    """Clock ticks since boot."""


def read_stat(pid: int) -> ProcStat | None:
    """Parse /proc/<pid>/stat; None when the process does not exist."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return None
    # The command name (field 2) is in parentheses and may contain spaces.
    fields = text[text.rindex(")") + 2 :].split()
    # fields[0] is field 3 (state); session is field 6, start time field 22.
    return ProcStat(state=fields[0], session=int(fields[3]), start_time=int(fields[19]))


def read_cmdline(pid: int) -> list[str]:
    """argv of a live process ([] for zombies, kernel threads or vanished processes)."""
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return []
    return [part.decode(errors="replace") for part in raw.split(b"\0") if part]


def _reap(pid: int) -> None:
    """Collect the exit status if ``pid`` is our own child (no-op otherwise)."""
    with contextlib.suppress(ChildProcessError, OSError):
        os.waitpid(pid, os.WNOHANG)


def is_ours(record: PidRecord) -> bool:
    """True while the recorded process runs: same pid, same start time, same argv."""
    _reap(record.pid)
    stat = read_stat(record.pid)
    if stat is None or stat.state == "Z" or stat.start_time != record.start_time:
        return False
    # pid + start time identify the process; argv guards against a daemon that re-execs.
    # An empty cmdline is the same process between exec and its first instruction, or
    # while it exits (its memory is already gone): still ours.
    cmdline = read_cmdline(record.pid)
    return not cmdline or cmdline == record.argv


def write_record(layout: RunLayout, record: PidRecord) -> None:
    write_text(layout.pid_record(record.daemon), json.dumps(asdict(record)) + "\n")


def read_records(layout: RunLayout) -> list[PidRecord]:
    """Every pid record in the run dir (unreadable ones are skipped)."""
    records: list[PidRecord] = []
    if not layout.pid_dir.is_dir():
        return records
    for path in sorted(layout.pid_dir.glob("*.pid")):
        try:
            data = json.loads(path.read_text())
            records.append(
                PidRecord(
                    daemon=str(data["daemon"]),
                    pid=int(data["pid"]),
                    start_time=int(data["start_time"]),
                    argv=[str(a) for a in data["argv"]],
                )
            )
        except (OSError, ValueError, KeyError, TypeError):
            continue
    return records


def remove_record(layout: RunLayout, daemon: str) -> None:
    layout.pid_record(daemon).unlink(missing_ok=True)


def start_daemon(
    layout: RunLayout,
    daemon: str,
    argv: Sequence[str],
    env: Mapping[str, str],
    user: str | None = None,
    group: int | None = None,
) -> subprocess.Popen[bytes]:
    """Start ``argv`` in the foreground as its own session leader (through the one Slurm
    runner), output to ``log/<daemon>.out``, and write its pid record."""
    proc = spawn_daemon(argv, layout.output_log(daemon), env, layout.root, user, group)
    # Popen returns mid-exec; wait until the new program's argv is visible.
    deadline = time.monotonic() + 2.0
    while not read_cmdline(proc.pid) and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.001)
    stat = read_stat(proc.pid)
    start_time = stat.start_time if stat is not None else -1
    write_record(layout, PidRecord(daemon, proc.pid, start_time, list(argv)))
    return proc


def session_members(leader: PidRecord) -> list[int]:
    """Live processes in the session ``leader`` started (its leftover children)."""
    members: list[int] = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        pid = int(entry.name)
        stat = read_stat(pid)
        if (
            stat is not None
            and stat.state != "Z"
            and stat.session == leader.pid
            and stat.start_time >= leader.start_time
        ):
            members.append(pid)
    return members


def wait_gone(record: PidRecord, timeout: float) -> bool:
    """Wait until the recorded process is no longer ours; True if it went."""
    deadline = time.monotonic() + timeout
    while is_ours(record):
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.05)
    return True


def stop(record: PidRecord, timeout: float = 10.0) -> str:
    """Stop a recorded daemon and the rest of its session. Returns what happened:
    "not running", "stopped" (SIGTERM) or "killed" (SIGKILL after ``timeout``).

    When the pid now belongs to another process, nothing is signalled. When the daemon is
    gone, leftovers in its session are still ours: Linux does not reuse a pid while it
    names a session that has members."""
    outcome = "not running"
    if not is_ours(record):
        stat = read_stat(record.pid)
        if stat is not None and not (stat.state == "Z" and stat.start_time == record.start_time):
            return outcome
    else:
        with contextlib.suppress(ProcessLookupError):
            os.kill(record.pid, signal.SIGTERM)
        outcome = "stopped"
        if not wait_gone(record, timeout):
            with contextlib.suppress(ProcessLookupError):
                os.kill(record.pid, signal.SIGKILL)
            wait_gone(record, 5.0)
            outcome = "killed"
        _reap(record.pid)  # gone may mean a zombie seen between is_ours' reap and its stat
    for pid in session_members(record):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
        _reap(pid)
    return outcome
