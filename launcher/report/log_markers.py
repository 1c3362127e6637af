"""Phase times from the batch script's log lines: ``[gantry <UTC time>] <message>``.

The generated script logs the attempt start ("job N (restart R ...) on NODES"), "preflight on
...", "preflight step finished ...", "launching ..." (once per launch: again after each
recovery inside the allocation) and "training finished" (see sbatch_templates/train.sbatch.j2);
the times between them are the phases of an attempt. The time is UTC with milliseconds
(``2026-12-03T09:00:00.125Z``); lines of older scripts carry whole seconds, read as well.
"""

from __future__ import annotations

import calendar
import re
import time
from dataclasses import dataclass, field

_LINE = re.compile(r"^\[gantry (\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(\.\d{1,9})?Z\] (.*)$", re.ASCII)
_MARKERS = (
    ("start", re.compile(r"^job \S+ \(restart (\d+)")),
    ("preflight", re.compile(r"^preflight on ")),
    ("gate", re.compile(r"^preflight step finished")),
    ("launch", re.compile(r"^launching ")),
    ("end", re.compile(r"^(training finished|training step failed|preflight gate refused|"
                       r"stopped by|requeueing)")),
)
PHASES = (("preflight", "preflight", "gate"), ("gate", "gate", "launch"),
          ("training", "launch", "end"))
"""(name, from marker, to marker) of each timed phase."""


def parse_line(line: str) -> tuple[float, str] | None:
    """(unix time, message) of a gantry log line, else None."""
    match = _LINE.match(line.strip())
    if match is None:
        return None
    try:
        stamp = calendar.timegm(time.strptime(match.group(1), "%Y-%m-%dT%H:%M:%S"))
    except ValueError:  # e.g. month 13: not a line the script wrote
        return None
    return stamp + float(match.group(2) or 0.0), match.group(3)


@dataclass(frozen=True)
class LogMark:
    """One gantry log line, with the attempt it belongs to."""

    time: float
    """Unix time of the line."""
    restart: int
    """Restart count of the attempt that logged it (the last "job N (restart R" line before
    it; -1 before any)."""
    marker: str | None
    """Its marker name ("start", "preflight", "gate", "launch", "end"), None for another
    line."""
    message: str
    """The text after the time."""


def log_marks(lines: list[str]) -> list[LogMark]:
    """Every gantry log line of ``lines`` in log order (the log is appended across
    requeues), each with its attempt's restart count and its marker."""
    found: list[LogMark] = []
    restart = -1
    for line in lines:
        parsed = parse_line(line)
        if parsed is None:
            continue
        stamp, message = parsed
        marker = None
        for name, pattern in _MARKERS:
            match = pattern.match(message)
            if match is not None:
                marker = name
                if name == "start":
                    restart = int(match.group(1))
                break
        found.append(LogMark(stamp, restart, marker, message))
    return found


@dataclass
class AttemptMarks:
    """Marker times of one attempt (restart count R)."""

    restart: int
    """Restart count the attempt logged."""
    times: dict[str, float] = field(default_factory=dict)
    """Marker -> unix time (first occurrence)."""
    end_message: str = ""
    """The message of the end marker."""

    def phase_seconds(self) -> dict[str, float]:
        """Seconds per phase that has both ends."""
        return {name: self.times[b] - self.times[a] for name, a, b in PHASES
                if a in self.times and b in self.times}


def attempt_marks(lines: list[str]) -> list[AttemptMarks]:
    """Marker times per attempt, in log order (the log is appended across requeues)."""
    attempts: list[AttemptMarks] = []
    for mark in log_marks(lines):
        if mark.marker == "start":
            attempts.append(AttemptMarks(mark.restart))
        if mark.marker is not None and attempts and mark.marker not in attempts[-1].times:
            attempts[-1].times[mark.marker] = mark.time
            if mark.marker == "end":
                attempts[-1].end_message = mark.message
    return attempts
