"""Tails a job directory while the job runs and reports what is new, as events.

Polled by the follow loop: new lines of the Slurm output file, a new attempt directory
(``runs/<job id>-<restart>[.<k>]``), a recovery inside the allocation (a new line of
``recoveries.jsonl``), a straggler found or back to pace (a new line of
``stragglers.jsonl``), the preflight outcome of an attempt (its verdicts once the gate
wrote the chosen nodes, or once the job moved on or ended), and new metrics records. Files are
read from where the last poll stopped; only complete lines count.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from launcher.errors import UserInputError
from launcher.job_dir import (
    CHOSEN_NODES_FILE,
    GATE_RECORD_FILE,
    LAUNCH_NODES_FILE,
    METRICS_FILE,
    PREFLIGHT_REPORT_FILE,
    RECOVERIES_FILE,
    JobDir,
    attempt_key,
)
from launcher.preflight.gate import read_verdicts
from launcher.preflight.verdict import NodeVerdict
from launcher.recovery.node_faults import describe_recovery
from launcher.report.run_data import StepRecord, parse_metrics_text
from launcher.train.straggler_log import CLEARED, read_stragglers
from launcher.train.straggler_log import describe as describe_straggler


@dataclass(frozen=True)
class LogLines:
    """New complete lines of the job's output file."""

    lines: tuple[str, ...]
    """Without newlines."""


@dataclass(frozen=True)
class AttemptStarted:
    """The batch script made a new attempt directory."""

    name: str
    """runs/ entry, <job id>-<restart>."""
    path: Path
    """The attempt directory."""


@dataclass(frozen=True)
class PreflightDone:
    """The gate of an attempt decided (or the attempt went on without preflight)."""

    attempt: str
    """Attempt name."""
    verdicts: dict[str, NodeVerdict]
    """Verdicts by node (empty when preflight was off)."""
    problems: dict[str, str]
    """Unreadable verdict outputs, by task."""
    chosen: tuple[str, ...]
    """Nodes the gate let run (empty when it refused)."""
    launch: tuple[str, ...]
    """Nodes the training step was launched on (empty if not launched)."""
    fabric: dict[str, Any] | None = None
    """The gate record's fabric verdict (launcher/preflight/fabric_judge.py's to_dict);
    None when the fabric test did not run or the record is unreadable."""


@dataclass(frozen=True)
class StepDone:
    """One new metrics record."""

    record: StepRecord
    """The record."""


@dataclass(frozen=True)
class Recovered:
    """A failed step was recovered (a new line of the job's recoveries.jsonl)."""

    line: str
    """launcher/recovery/node_faults.describe_recovery's line."""


@dataclass(frozen=True)
class Straggler:
    """A rank found slow, or back to pace (a new line of the job's stragglers.jsonl)."""

    line: str
    """launcher/train/straggler_log.describe's line."""
    flagged: bool
    """Found slow (else back to pace)."""


@dataclass(frozen=True)
class Note:
    """Something the watcher could not read (the follow goes on)."""

    text: str
    """One line."""


Event = LogLines | AttemptStarted | PreflightDone | StepDone | Recovered | Straggler | Note


def _read_from(path: Path, offset: int) -> tuple[str, int]:
    """Complete lines of ``path`` after ``offset`` and the offset after them."""
    try:
        with path.open("rb") as handle:
            handle.seek(offset)
            chunk = handle.read()
    except FileNotFoundError:
        return "", offset
    end = chunk.rfind(b"\n") + 1
    return chunk[:end].decode("utf-8", errors="replace"), offset + end


def _node_file(path: Path) -> tuple[str, ...]:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError:
        return ()
    return tuple(n for n in re.split(r"[\s,]+", text) if n)


def _fabric(path: Path) -> dict[str, Any] | None:
    """The fabric verdict in a gate record, if it holds one with a message and culprits."""
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError):
        return None
    fabric = record.get("fabric") if isinstance(record, dict) else None
    if not (isinstance(fabric, dict) and isinstance(fabric.get("message"), str)
            and isinstance(fabric.get("culprits"), dict)):
        return None
    return fabric


@dataclass
class _Attempt:
    name: str
    path: Path
    is_attempt: bool = True
    """A runs/<job id>-<restart> directory (else only a metrics directory)."""
    metrics_offset: int = 0
    preflight_reported: bool = False


@dataclass
class JobDirWatcher:
    """Remembers what it has reported; :meth:`poll` returns only what is new."""

    job_dir: JobDir
    """The job directory."""
    job_id: str
    """Slurm job id (names the log file and the attempts)."""
    known_nodes: tuple[str, ...] = ()
    """Nodes a verdict may name (the site's nodes)."""
    log_offset: int = 0
    recoveries_offset: int = 0
    stragglers_seen: int = 0
    attempts: list[_Attempt] = field(default_factory=list)

    def poll(self, final: bool = False) -> list[Event]:
        """What is new since the last poll; ``final``: the job ended, report every pending
        preflight outcome."""
        events: list[Event] = []
        text, self.log_offset = _read_from(self.job_dir.log_file(self.job_id), self.log_offset)
        seen = {a.name for a in self.attempts}
        for path in self._run_dirs():
            if path.name not in seen:
                attempt = _Attempt(path.name, path, is_attempt=attempt_key(path.name) is not None)
                self.attempts.append(attempt)
                seen.add(path.name)
                if attempt.is_attempt:
                    events.append(AttemptStarted(path.name, path))
        attempts = [a for a in self.attempts if a.is_attempt]
        gate: list[Event] = []
        for attempt in self.attempts:
            over = final or (attempt.is_attempt and attempt is not attempts[-1])
            for event in self._attempt_events(attempt, over):
                (gate if isinstance(event, PreflightDone) else events).append(event)
        recovered, self.recoveries_offset = _read_from(self.job_dir.path / RECOVERIES_FILE,
                                                       self.recoveries_offset)
        for line in recovered.splitlines():
            try:
                record = json.loads(line)
            except ValueError:
                events.append(Note("skipped a damaged line of recoveries.jsonl"))
                continue
            if isinstance(record, dict):
                events.append(Recovered(describe_recovery(record)))
        found = read_stragglers(self.job_dir.path)
        for record in found[self.stragglers_seen:]:
            events.append(Straggler(describe_straggler(record),
                                    record["event"] != CLEARED))
        self.stragglers_seen = max(self.stragglers_seen, len(found))
        # Order within one poll: new attempts and steps, then the log (so "training finished"
        # follows the last step), then the gate's outcome (after the log's gate lines).
        if text:
            events.append(LogLines(tuple(text.splitlines())))
        return events + gate

    def _run_dirs(self) -> list[Path]:
        """This job's attempts (<job id>-<restart>, in order), then other run directories
        (a `gantry train` run dir named after the job) that hold metrics."""
        runs = self.job_dir.runs
        if not runs.is_dir():
            return []
        mine = [p for p in runs.iterdir() if p.is_dir() and attempt_key(p.name) is not None
                and p.name.split("-")[0] == self.job_id]
        others = [p for p in runs.iterdir() if p.is_dir() and attempt_key(p.name) is None
                  and (p / METRICS_FILE).is_file()]
        return sorted(mine, key=lambda p: attempt_key(p.name) or ()) + sorted(others)

    def _attempt_events(self, attempt: _Attempt, over: bool) -> list[Event]:
        events: list[Event] = []
        path = attempt.path
        launch = _node_file(path / LAUNCH_NODES_FILE)
        chosen = _node_file(path / CHOSEN_NODES_FILE)
        metrics = path / METRICS_FILE
        ready = launch or over or metrics.exists()
        if attempt.is_attempt and not attempt.preflight_reported and ready:
            attempt.preflight_reported = True
            verdicts: dict[str, NodeVerdict] = {}
            problems: dict[str, str] = {}
            report = path / PREFLIGHT_REPORT_FILE
            if report.is_file():
                text = report.read_text(errors="replace")
                names = self.known_nodes or tuple(set(re.findall(r'"node":\s*"([^"]+)"', text)))
                verdicts, problems = read_verdicts(text, names)
            events.append(PreflightDone(attempt.name, verdicts, problems, chosen or launch,
                                        launch, _fabric(path / GATE_RECORD_FILE)))
        text, attempt.metrics_offset = _read_from(metrics, attempt.metrics_offset)
        for line in text.splitlines():
            try:
                events += [StepDone(r) for r in parse_metrics_text(line + "\n", metrics,
                                                                   attempt.name)]
            except UserInputError as err:
                events.append(Note(f"skipped a metrics line: {err}"))
        return events
