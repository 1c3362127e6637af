"""The monitor's loop on one node: sample, compare, write events, ask for an eviction on FAIL.

``gantry monitor`` runs this once per node that runs ranks, beside the training step. Every
``interval_s`` it takes a sample (launcher/monitor/sample.py) and writes each new finding
(a new key, or a new observation of one) as a line of ``<attempt dir>/node-health/<node>.jsonl``
(``{"time", "node", "check", "grade", "observed", "expected", "sampled_at", "previous_at"}``:
when the sample that saw it began, and the sample before it; one writer per file, so
writers on several nodes never append to one file); a ``start`` line (grade INFO) says what
it watches. A FAIL asks that the node leave the job (launcher/recovery/evictions.py): the
trainer then checkpoints the step and stops (a command job's step is stopped by ``gantry
step-watch``), and ``gantry recover`` swaps the node for a spare. It stops on TERM/INT,
when ``<attempt dir>/monitor-stop`` appears, or after ``max_samples``; nothing it meets (an
unreadable tool, a full disk) is allowed to stop the training: it reports on stderr and
goes on, or ends quietly.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from launcher.atomic_write import WriteError
from launcher.job_dir import HEALTH_DIR, JOB_DIR_ENV, MONITOR_STOP_FILE
from launcher.monitor.sample import Finding, Sample, compare, describe, take_sample
from launcher.preflight.thresholds import Thresholds
from launcher.recovery.evictions import request_eviction
from launcher.report.read_cache import ReadCache

POLL_S = 0.1
"""How often the stop file and signals are looked at between samples."""


@dataclass(frozen=True)
class MonitorOptions:
    """What one node's monitor needs."""

    attempt_dir: Path
    node: str
    interval_s: float
    xid_table: Mapping[int, str]
    thresholds: Thresholds
    gpus: bool
    """Sample the GPUs and the kernel log (launcher/monitor/sample.py: gpus_watched)."""
    evict: bool = True
    """Ask for an eviction on FAIL."""
    max_samples: int | None = None
    textfile_dir: Path | None = None
    """The site's metrics.textfile_dir: this node's Prometheus textfile is rewritten there
    after every sample (launcher/report/textfile.py); None: none written."""


def health_file(attempt_dir: Path, node: str) -> Path:
    return attempt_dir / HEALTH_DIR / f"{node}.jsonl"


def _append(path: Path, record: dict[str, Any]) -> None:
    line = (json.dumps(record, sort_keys=True, default=str) + "\n").encode()
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        os.write(fd, line)
        os.fsync(fd)
    finally:
        os.close(fd)


HEALTH_READ_LIMIT = 16 << 20
"""How much of one node's event file is read."""


def health_event(line: str) -> dict[str, Any] | None:
    """One line of a node's event file: the event, None for a torn or foreign line."""
    try:
        record = json.loads(line)
    except (ValueError, RecursionError):
        return None
    if isinstance(record, dict) and isinstance(record.get("time"), int | float):
        return record
    return None


def read_health_events(attempt_dir: Path) -> list[dict[str, Any]]:
    """Every node's events of the attempt, by time; torn or foreign lines skipped."""
    directory = attempt_dir / HEALTH_DIR
    try:
        paths = sorted(p for p in directory.iterdir() if p.suffix == ".jsonl")
    except OSError:
        return []
    events = []
    for path in paths:
        try:
            text = path.read_text(encoding="utf-8", errors="replace")[:HEALTH_READ_LIMIT]
        except OSError:
            continue
        events += [record for line in text.splitlines()
                   if (record := health_event(line)) is not None]
    return sorted(events, key=lambda e: (e["time"], str(e.get("node"))))


class _Writer:
    """Writes the node's events; a failed write is reported once on stderr, never raised."""

    def __init__(self, opts: MonitorOptions) -> None:
        self.opts = opts
        self.path = health_file(opts.attempt_dir, opts.node)
        self.broken = False

    def event(self, check: str, grade: str, observed: str, expected: str,
              **extra: Any) -> None:
        record = {"time": time.time(), "node": self.opts.node, "check": check,
                  "grade": grade, "observed": observed, "expected": expected, **extra}
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            _append(self.path, record)
        except OSError as err:
            if not self.broken:
                sys.stderr.write(f"gantry monitor: {self.opts.node}: cannot write "
                                 f"{self.path} ({err.strerror})\n")
            self.broken = True


def _evict(opts: MonitorOptions, finding: Finding) -> None:
    try:
        request_eviction(opts.attempt_dir, opts.node, "health",
                         f"{finding.check}: {finding.observed}",
                         {"check": finding.check, "grade": finding.grade,
                          "observed": finding.observed, "expected": finding.expected},
                         what=f"health-{finding.word}"[:48])
    except (OSError, WriteError) as err:
        sys.stderr.write(f"gantry monitor: {opts.node}: cannot ask for an eviction ({err})\n")


class _Metrics:
    """This node's Prometheus textfile, rewritten after each sample when the site asks for
    it, each time reading only what the job's files gained since the last (one ReadCache for
    the monitor's life); a failure is said once on stderr and never stops the monitor."""

    def __init__(self, opts: MonitorOptions) -> None:
        self.opts = opts
        self.failed = False
        self.cache = ReadCache()

    def write(self) -> None:
        if self.opts.textfile_dir is None or self.failed:
            return
        from launcher.report.textfile import write_textfiles

        job_dir = Path(os.environ.get(JOB_DIR_ENV) or self.opts.attempt_dir.parent.parent)
        try:
            write_textfiles(job_dir, self.opts.textfile_dir, [self.opts.node],
                            cache=self.cache)
        except Exception as err:
            self.failed = True
            sys.stderr.write(f"gantry monitor: {self.opts.node}: no more Prometheus textfiles "
                             f"in {self.opts.textfile_dir} ({type(err).__name__}: {err})\n")


def run_monitor(opts: MonitorOptions, stop: threading.Event,
                sample: Callable[[float], Sample] | None = None) -> int:
    """The loop (see the module docstring); returns the number of FAIL findings."""
    take = sample or (lambda now: take_sample(now, opts.gpus, opts.thresholds.tool_timeout_s))
    writer = _Writer(opts)
    stop_file = opts.attempt_dir / MONITOR_STOP_FILE
    first = take(time.time())
    writer.event("monitor", "INFO", describe(first),
                 f"a sample every {opts.interval_s:g} s", event="start", pid=os.getpid())
    metrics = _Metrics(opts)
    metrics.write()
    previous = first
    reported: dict[str, str] = {}
    fails = 0
    samples = 1
    while opts.max_samples is None or samples < opts.max_samples:
        deadline = time.monotonic() + opts.interval_s
        while time.monotonic() < deadline and not stop.is_set() and not stop_file.exists():
            stop.wait(min(POLL_S, max(0.0, deadline - time.monotonic())))
        if stop.is_set() or stop_file.exists():
            break
        now = take(time.time())
        samples += 1
        for finding in compare(first, previous, now, opts.xid_table, opts.thresholds):
            if reported.get(finding.key) == finding.observed:
                continue
            reported[finding.key] = finding.observed
            writer.event(finding.check, finding.grade, finding.observed, finding.expected,
                         sampled_at=now.time, previous_at=previous.time)
            if finding.grade == "FAIL":
                fails += 1
                if opts.evict:
                    _evict(opts, finding)
        previous = now
        metrics.write()
    with contextlib.suppress(OSError):
        writer.event("monitor", "INFO", f"{samples} samples, {fails} FAIL findings",
                     "stopped with the step", event="stop")
    return fails
