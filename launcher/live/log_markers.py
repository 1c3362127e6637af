"""Phase times from the batch script's log lines: ``[gantry <UTC time>] <message>``.

The generated script logs the attempt start ("job N (restart R ...) on NODES"), "preflight on
...", "preflight step finished ...", "launching ..." and "training finished" (see
sbatch_templates/train.sbatch.j2); the times between them are the phases of an attempt.
"""

from __future__ import annotations

import calendar
import re
import time
from dataclasses import dataclass, field

_LINE = re.compile(r"^\[gantry (\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ)\] (.*)$")
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
    stamp = calendar.timegm(time.strptime(match.group(1), "%Y-%m-%dT%H:%M:%SZ"))
    return float(stamp), match.group(2)


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
    for line in lines:
        parsed = parse_line(line)
        if parsed is None:
            continue
        stamp, message = parsed
        for name, pattern in _MARKERS:
            match = pattern.match(message)
            if match is None:
                continue
            if name == "start":
                attempts.append(AttemptMarks(int(match.group(1))))
            if attempts and name not in attempts[-1].times:
                attempts[-1].times[name] = stamp
                if name == "end":
                    attempts[-1].end_message = message
            break
    return attempts
