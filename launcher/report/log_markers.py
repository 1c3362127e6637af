"""Phase times from the batch script's log lines: ``[gantry <UTC time>] <message>``.

The generated script logs the attempt start ("job N (restart R ...) on NODES"), "preflight on
...", "preflight step finished ...", "launching ..." (once per launch: again after each
recovery inside the allocation) and "training finished" (see sbatch_templates/train.sbatch.j2);
the times between them are the phases of an attempt. The time is UTC with milliseconds
(``2026-12-03T09:00:00.125Z``); lines of older scripts carry whole seconds, read as well.
"""

from __future__ import annotations

import re
from typing import NamedTuple

_LINE = re.compile(r"^\[gantry (\d{4})-(\d\d)-(\d\d)T(\d\d):(\d\d):(\d\d)(\.\d{1,9})?Z\] (.*)$",
                   re.ASCII)
_START = re.compile(r"job \S+ \(restart (\d+)")
_MARKERS = (
    ("preflight", ("preflight on ",)),
    ("gate", ("preflight step finished",)),
    ("launch", ("launching ",)),
    ("end", ("training finished", "training step failed", "preflight gate refused",
             "stopped by", "requeueing")),
)
"""Marker name -> the prefixes of its messages (the start marker: :data:`_START`)."""
PHASES = (("preflight", "preflight", "gate"), ("gate", "gate", "launch"),
          ("training", "launch", "end"))
"""(name, from marker, to marker) of each timed phase."""


def parse_line(line: str) -> tuple[float, str] | None:
    """(unix time, message) of a gantry log line, else None."""
    match = _LINE.match(line.strip())
    if match is None:
        return None
    stamp = utc_seconds(*(int(part) for part in match.group(1, 2, 3, 4, 5, 6)))
    if stamp is None:  # e.g. month 13: not a line the script wrote
        return None
    return stamp + float(match.group(7) or 0.0), match.group(8)


def utc_seconds(year: int, month: int, day: int, hour: int, minute: int,
                second: int) -> int | None:
    """Unix time of a UTC calendar time (``calendar.timegm``, without importing calendar and
    datetime at every start); None when a part is out of range (second 60 and 61 allowed,
    as strptime does)."""
    leap = year % 4 == 0 and (year % 100 != 0 or year % 400 == 0)
    month_days = (31, 29 if leap else 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31)
    if not (1 <= month <= 12 and 1 <= day <= month_days[month - 1] and hour < 24
            and minute < 60 and second <= 61):
        return None
    # Days since 1970-01-01 by the civil-from-days method: years counted from March.
    shifted = year - (month <= 2)
    era = shifted // 400
    year_of_era = shifted - era * 400
    day_of_year = (153 * (month + (-3 if month > 2 else 9)) + 2) // 5 + day - 1
    day_of_era = year_of_era * 365 + year_of_era // 4 - year_of_era // 100 + day_of_year
    days = era * 146097 + day_of_era - 719468
    return ((days * 24 + hour) * 60 + minute) * 60 + second


class LogMark(NamedTuple):
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


def mark_line(restart: int, line: str) -> tuple[int, LogMark | None]:
    """One line of the log read after lines that left restart count ``restart`` (-1 before
    any): (the restart count after it, its mark, None when not a gantry line)."""
    parsed = parse_line(line)
    if parsed is None:
        return restart, None
    stamp, message = parsed
    marker = None
    start = _START.match(message) if message.startswith("job ") else None
    if start is not None:
        marker, restart = "start", int(start.group(1))
    else:
        marker = next((name for name, prefixes in _MARKERS
                       if message.startswith(prefixes)), None)
    return restart, LogMark(stamp, restart, marker, message)


def log_marks(lines: list[str]) -> list[LogMark]:
    """Every gantry log line of ``lines`` in log order (the log is appended across
    requeues), each with its attempt's restart count and its marker."""
    found: list[LogMark] = []
    restart = -1
    for line in lines:
        restart, mark = mark_line(restart, line)
        if mark is not None:
            found.append(mark)
    return found


class AttemptMarks:
    """Marker times of one attempt: ``restart``, the restart count it logged; ``times``,
    marker -> unix time (first occurrence); ``end_message``, the end marker's message."""

    def __init__(self, restart: int) -> None:
        self.restart = restart
        self.times: dict[str, float] = {}
        self.end_message = ""

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
