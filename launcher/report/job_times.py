"""When each phase of a job happened, read from what the job already records (for goodput).

Sources, per timestamp (the first one present is used; ``JobTimes.sources`` says which):

- submitted: meta.json ``submitted_at`` (`gantry submit`), else ``created_at``;
- each batch script's start, launches, failures and last line: its ``[gantry <time>]`` log
  lines (logs/slurm-<job id>.out, appended across requeues; launcher/report/log_markers.py),
  else Slurm's start time of the job for its first start;
- each launch of the training step (attempt dir ``runs/<id>-<restart>[.<k>]``): the k-th
  "launching" line of restart R's script, else the earliest ``ranks/<R>.start`` record of the
  attempt, else the mtime of its ``launch_nodes`` file (last resort);
- training: events.jsonl's ``start`` (the loop begins), ``end`` / ``stop`` (the loop ended;
  with ``checkpoint_s``, its final checkpoint wait) and each step record's ``time`` and
  ``checkpoint_s`` in metrics.jsonl and metrics.replayed.jsonl (launcher/train/trainer.py),
  in every run directory under runs/ (a job's ``gantry train`` writes ``runs/<job name>/``
  and every attempt resumes there); each loop run belongs to the attempt launched last
  before its start event;
- the end of an ended job: its last recorded time, or Slurm's end time when later.

Reading never fails on a damaged line: a line that is not a JSON object with the fields
needed is skipped (these files only annotate the job here). With a ReadCache
(launcher/report/read_cache.py) the log and the JSONL files are read only where they grew
since that cache's last read, with the same result as a whole read.
"""

from __future__ import annotations

import json
import math
import os
from bisect import bisect_right
from collections.abc import Callable
from pathlib import Path
from typing import Any, NamedTuple, TypeVar

from launcher.job_dir import (
    EVENTS_FILE,
    LAUNCH_NODES_FILE,
    LOGS_DIR,
    META_FILE,
    METRICS_FILE,
    RANKS_DIR,
    REPLAYED_METRICS_FILE,
    RUNS_DIR,
    attempt_key,
    log_file_name,
)
from launcher.report.log_markers import LogMark, mark_line
from launcher.report.read_cache import Fold, ReadCache, fold_lines


class StepTime(NamedTuple):
    """One step record."""

    step: int
    """1-based step."""
    time: float
    """When rank 0 recorded it (the step's end)."""
    checkpoint_s: float
    """Seconds the loop spent in checkpoint calls between the previous record and this
    step (0 in records of older trainers)."""
    replayed: bool
    """Read from metrics.replayed.jsonl (a later run of the same directory redid it)."""


class LoopRun(NamedTuple):
    """One run of the training loop: from a ``start`` event to its ``end``/``stop``."""

    start: float
    """The start event's time (checkpoint loaded, the first step begins)."""
    steps: tuple[StepTime, ...]
    """Its step records, in time order."""
    close: float | None = None
    """The end or stop event's time (None: the loop did not finish: failed or running)."""
    close_checkpoint_s: float = 0.0
    """The loop's checkpoint time after its last step record (the final save and wait)."""
    checkpoints: int = 0
    """Checkpoints it completed (events.jsonl)."""


class AttemptTimes(NamedTuple):
    """One attempt directory."""

    name: str
    """Its name, ``<job id>-<restart>[.<k>]``."""
    restart: int
    """Slurm's restart count."""
    relaunch: int
    """k: the relaunch inside the allocation (0: the first launch)."""
    launch: float | None
    """When its training step was launched."""
    runs: tuple[LoopRun, ...]
    """The training loop runs its launch started (their start events follow its launch and
    precede the next attempt's): one, or none when the step failed before its loop began."""

    @property
    def checkpoints(self) -> int:
        """Checkpoints its runs completed."""
        return sum(run.checkpoints for run in self.runs)


class ScriptTimes(NamedTuple):
    """One start of the batch script (one restart count)."""

    restart: int
    start: float | None
    """Its first log line ("job N (restart R ...)")."""
    launches: tuple[float, ...]
    """Its "launching ..." lines, in order (one per launch of the step)."""
    failures: int
    """Its "training step failed" lines."""
    last: float | None
    """Its last log line."""
    finished: bool
    """It logged "training finished"."""
    failed_last: bool = False
    """Its last "training step failed" line comes after its last "launching" line (the
    step it launched last failed)."""


class JobTimes(NamedTuple):
    """Everything goodput needs from one job directory."""

    job_id: str
    submitted: float | None
    scripts: tuple[ScriptTimes, ...]
    """By restart count, ascending."""
    attempts: tuple[AttemptTimes, ...]
    """Oldest first (restart, then relaunch)."""
    ended: bool
    """The job is over (Slurm's state is terminal, or its script logged the end)."""
    end: float | None
    """When it ended (None while it runs)."""
    sources: tuple[str, ...] = ()
    """Where the times came from, where not from the primary source (docstring above)."""


def _number(record: dict[str, Any], key: str) -> float | None:
    value = record.get(key)
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    number = float(value)
    return number if math.isfinite(number) else None


def json_lines(path: Path) -> list[dict[str, Any]]:
    """The JSON objects of a JSONL file, damaged lines skipped; [] when it is missing."""
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return []
    found = []
    for line in text.splitlines():
        try:
            record = json.loads(line)
        except (ValueError, RecursionError):
            continue
        if isinstance(record, dict):
            found.append(record)
    return found


def _record(line: str) -> dict[str, Any] | None:
    """The JSON object of a line, else None."""
    try:
        record = json.loads(line)
    except (ValueError, RecursionError):
        return None
    return record if isinstance(record, dict) else None


def _step_time(line: str, replayed: bool) -> StepTime | None:
    record = _record(line)
    if record is None:
        return None
    step, when = _number(record, "step"), _number(record, "time")
    if step is None or when is None or step != int(step) or step < 1:
        return None
    return StepTime(int(step), when, max(_number(record, "checkpoint_s") or 0.0, 0.0),
                    replayed)


def _step(state: None, line: str) -> tuple[None, StepTime | None]:
    return None, _step_time(line, False)


def _replayed_step(state: None, line: str) -> tuple[None, StepTime | None]:
    return None, _step_time(line, True)


class _Event(NamedTuple):
    kind: str
    """"start", "close" (an end or stop event) or "checkpoint"."""
    time: float
    checkpoint_s: float = 0.0


def _event(state: None, line: str) -> tuple[None, _Event | None]:
    record = _record(line)
    when = None if record is None else _number(record, "time")
    if record is None or when is None:
        return None, None
    kind = record.get("event")
    if kind == "start":
        return None, _Event("start", when)
    if kind in ("end", "stop"):
        return None, _Event("close", when, _number(record, "checkpoint_s") or 0.0)
    if kind == "checkpoint":
        return None, _Event("checkpoint", when)
    return None, None


_STEPS = Fold("steps", None, _step)
_REPLAYED_STEPS = Fold("replayed steps", None, _replayed_step)
_EVENTS = Fold("events", None, _event)
_MARKS = Fold("marks", -1, mark_line)


def _loop_runs(run_dir: Path, cache: ReadCache | None = None) -> list[LoopRun]:
    """The loop runs recorded in a `gantry train` run directory (the job's
    ``runs/<job name>/``, resumed in place by every attempt), in time order."""
    events = fold_lines(run_dir / EVENTS_FILE, _EVENTS, cache)
    starts = sorted(e.time for e in events if e.kind == "start")
    closes = sorted((e.time, e.checkpoint_s) for e in events if e.kind == "close")
    saved = [e.time for e in events if e.kind == "checkpoint"]
    steps = sorted(fold_lines(run_dir / METRICS_FILE, _STEPS, cache)
                   + fold_lines(run_dir / REPLAYED_METRICS_FILE, _REPLAYED_STEPS, cache),
                   key=lambda s: s.time)
    times = [s.time for s in steps]
    runs = []
    for index, start in enumerate(starts):
        until = starts[index + 1] if index + 1 < len(starts) else math.inf
        # the steps with start < time <= until (sorted by time: one slice)
        mine = tuple(steps[bisect_right(times, start):bisect_right(times, until)])
        close = next(((t, c) for t, c in closes if start < t <= until), None)
        runs.append(LoopRun(start, mine, None if close is None else close[0],
                            0.0 if close is None else max(close[1], 0.0),
                            sum(1 for t in saved if start < t <= until)))
    return runs


def _start_time(path: Path) -> float | None:
    """The time of one ``ranks/<R>.start`` record."""
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError):
        return None
    return _number(record, "time") if isinstance(record, dict) else None


T = TypeVar("T")


def start_records(attempt: Path, label: str, read: Callable[[Path], T | None],
                  cache: ReadCache | None = None) -> list[T]:
    """``read`` of each ``ranks/<R>.start`` record of an attempt, those it could read (with
    ``cache``, each record read once per inode under ``label``: a rank writes it once)."""
    try:
        with os.scandir(attempt / RANKS_DIR) as listing:
            entries = [e for e in listing if e.name.endswith(".start")]
    except OSError:
        return []
    found = []
    for entry in entries:
        path = Path(entry.path)
        value = read(path) if cache is None else cache.once(path, entry.inode(), label, read)
        if value is not None:
            found.append(value)
    return found


def _rank_start(attempt: Path, cache: ReadCache | None = None) -> float | None:
    """The earliest ``ranks/<R>.start`` time of an attempt."""
    return min(start_records(attempt, "start time", _start_time, cache), default=None)


def _mtime(path: Path) -> float | None:
    try:
        return path.stat().st_mtime
    except OSError:
        return None


def _scripts(marks: list[LogMark]) -> list[ScriptTimes]:
    by_restart: dict[int, list[LogMark]] = {}
    for mark in marks:
        if mark.restart >= 0:
            by_restart.setdefault(mark.restart, []).append(mark)
    scripts = []
    for restart in sorted(by_restart):
        mine = by_restart[restart]
        start = next((m.time for m in mine if m.marker == "start"), None)
        failed = [i for i, m in enumerate(mine) if m.message.startswith("training step failed")]
        launched = [i for i, m in enumerate(mine) if m.marker == "launch"]
        scripts.append(ScriptTimes(
            restart, start, tuple(mine[i].time for i in launched), len(failed),
            mine[-1].time, any(m.message.startswith("training finished") for m in mine),
            bool(failed) and failed[-1] > max(launched, default=-1)))
    return scripts


def _assign(attempts: list[AttemptTimes], loops: list[LoopRun],
            job_id: str) -> list[AttemptTimes]:
    """Each loop run given to the attempt launched last before it started (the first
    attempt, for one that started before every launch known)."""
    if not loops:
        return attempts
    if not attempts:
        attempts = [AttemptTimes(f"{job_id}-0", 0, 0, None, ())]
    owned: list[list[LoopRun]] = [[] for _ in attempts]
    for run in loops:
        owner = 0
        for index, attempt in enumerate(attempts):
            if attempt.launch is not None and attempt.launch <= run.start:
                owner = index
        owned[owner].append(run)
    return [AttemptTimes(a.name, a.restart, a.relaunch, a.launch, tuple(mine))
            for a, mine in zip(attempts, owned, strict=True)]


def read_job_times(job_dir: Path, state: dict[str, Any] | None = None,
                   cache: ReadCache | None = None) -> JobTimes:
    """The times of job directory ``job_dir``. ``state``: Slurm's view of the job as `gantry
    status` records it (``terminal``, ``start_time``, ``end_time``); default: meta.json's
    ``last_state``. ``cache``: what earlier calls read (a reader that calls again and again:
    the run monitor); the result is the same as without."""
    sources: list[str] = []
    try:
        meta = json.loads((job_dir / META_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError):
        meta = {}
    meta = meta if isinstance(meta, dict) else {}
    if state is None:
        last = meta.get("last_state")
        state = last if isinstance(last, dict) else {}
    job_id = str(meta.get("job_id") or "")
    submitted = _number(meta, "submitted_at")
    if submitted is None:
        submitted = _number(meta, "created_at")
        if submitted is not None:
            sources.append("submitted: meta.json created_at (no submitted_at)")
    marks = fold_lines(job_dir / LOGS_DIR / log_file_name(job_id), _MARKS, cache) \
        if job_id else []
    scripts = _scripts(marks)
    slurm_start = _number(state, "start_time") or None  # Slurm reports 0 for "not yet"
    slurm_end = _number(state, "end_time") or None
    if (not scripts or scripts[0].start is None) and slurm_start is not None:
        first = scripts[0] if scripts else None
        scripts[:1] = [ScriptTimes(first.restart if first else 0, slurm_start,
                                   first.launches if first else (),
                                   first.failures if first else 0,
                                   first.last if first else None,
                                   first.finished if first else False,
                                   first.failed_last if first else False)]
        sources.append("first script start: Slurm's start time (no log line)")
    attempts: list[AttemptTimes] = []
    runs_dir = job_dir / RUNS_DIR
    names = sorted(p.name for p in runs_dir.iterdir() if p.is_dir()) if runs_dir.is_dir() \
        else []
    loops = sorted((run for name in names for run in _loop_runs(runs_dir / name, cache)),
                   key=lambda run: run.start)
    launches = {s.restart: s.launches for s in scripts}
    for name in sorted((n for n in names if attempt_key(n) is not None),
                       key=lambda n: attempt_key(n) or ()):
        key = attempt_key(name)
        assert key is not None
        restart, relaunch = key[2], key[3]
        path = runs_dir / name
        logged = launches.get(restart, ())
        launch: float | None = logged[relaunch] if relaunch < len(logged) else None
        if launch is None:
            launch = _rank_start(path, cache)
            if launch is not None:
                sources.append(f"{name}: launch: its ranks' start records (no log line)")
            else:
                launch = _mtime(path / LAUNCH_NODES_FILE)
                if launch is not None:
                    sources.append(f"{name}: launch: the mtime of {LAUNCH_NODES_FILE} "
                                   "(last resort: no log line, no rank records)")
        attempts.append(AttemptTimes(name, restart, relaunch, launch, ()))
    attempts = _assign(attempts, loops, job_id)
    ended = bool(state.get("terminal")) or bool(scripts and scripts[-1].finished)
    end: float | None = None
    if ended:
        known = [t for t in (*(s.last for s in scripts),
                             *(r.close for a in attempts for r in a.runs),
                             *(s.time for a in attempts for r in a.runs for s in r.steps))
                 if t is not None]
        end = max(known, default=None)
        if slurm_end is not None and (end is None or slurm_end > end):
            end = slurm_end
            sources.append("end: Slurm's end time (later than the last record)")
    return JobTimes(job_id, submitted, tuple(scripts), tuple(attempts), ended, end,
                    tuple(sources))
