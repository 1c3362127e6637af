"""Reads what `gantry train` writes into a run directory: metrics.jsonl and trace.json.

metrics.jsonl: one JSON object per optimizer step (rank 0): step, loss, lr, grad_norm,
tokens_per_s and ``ranks``: per-rank native timings (compute/send/recv/bubble/sync/total
seconds). trace.json: Chrome trace events ("ph": "X", microseconds) per rank (pid) with
``args.step``. A malformed line or event is an error naming the file (and line); only a last
line still being written (no newline yet) is skipped, so a live run can be read.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from launcher.errors import UserInputError
from launcher.user_files import require_regular_file

METRICS_FILE = "metrics.jsonl"
TRACE_FILE = "trace.json"
TIMING_KEYS = ("compute_s", "send_s", "recv_s", "bubble_s", "sync_s", "total_s")


@dataclass(frozen=True)
class RankTiming:
    """One rank's native timers for one step, in seconds."""

    compute_s: float
    """Forward, backward and weight-gradient kernels."""
    send_s: float
    """Posting sends and waiting for them to complete."""
    recv_s: float
    """Posting receives and waiting on ones whose data had already arrived."""
    bubble_s: float
    """Blocked waiting for a peer's data (pipeline bubble)."""
    sync_s: float
    """After the table: data-parallel and tied all-reduces, the norm, clipping, and enqueueing
    the optimizer update (which may still run into the next step)."""
    total_s: float
    """The whole step on this rank."""

    @property
    def pipeline_s(self) -> float:
        """Time in the schedule's action table (everything but the sync phase)."""
        return self.compute_s + self.send_s + self.recv_s + self.bubble_s


@dataclass(frozen=True)
class StepRecord:
    """One line of metrics.jsonl."""

    step: int
    """1-based optimizer step."""
    loss: float
    """Mean training loss of the step."""
    tokens_per_s: float
    """Global tokens of the step over the slowest rank's step time."""
    lr: float
    """Learning rate used."""
    grad_norm: float
    """Global gradient norm before clipping."""
    ranks: tuple[RankTiming, ...]
    """Per world rank."""
    attempt: str = ""
    """Run directory (attempt) name the record came from."""


def _number(record: dict[str, Any], key: str, where: str) -> float:
    value = record.get(key)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise UserInputError(f"{where}: {key}: {value!r} is not allowed (expected a number)")
    return float(value)


def _finite(record: dict[str, Any], key: str, where: str, low: float | None = None) -> float:
    """A finite number (>= ``low`` when given): a trace's times and ids."""
    value = _number(record, key, where)
    if not math.isfinite(value) or (low is not None and value < low):
        bound = "a finite number" if low is None else f"a finite number >= {low:g}"
        raise UserInputError(f"{where}: {key}: {value!r} is not allowed (expected {bound})")
    return value


def parse_record(text: str, where: str, attempt: str = "") -> StepRecord:
    """One metrics line -> StepRecord (UserInputError naming ``where`` when malformed)."""
    try:
        record = json.loads(text)
    except json.JSONDecodeError as err:
        raise UserInputError(f"{where}: not JSON ({err.msg})") from None
    except RecursionError:
        raise UserInputError(f"{where}: nested too deeply to be a metrics record") from None
    if not isinstance(record, dict):
        raise UserInputError(f"{where}: expected a JSON object, got {type(record).__name__}")
    ranks_raw = record.get("ranks", [])
    if not isinstance(ranks_raw, list):
        raise UserInputError(f"{where}: ranks: expected a list of per-rank timings")
    ranks = []
    for index, entry in enumerate(ranks_raw):
        if not isinstance(entry, dict):
            raise UserInputError(f"{where}: ranks[{index}]: expected an object")
        ranks.append(RankTiming(*(_number(entry, k, f"{where}: ranks[{index}]")
                                  for k in TIMING_KEYS)))
    step = _number(record, "step", where)
    if step != int(step) or step < 1:
        raise UserInputError(f"{where}: step: {record['step']!r} is not allowed "
                             "(expected an integer >= 1)")
    return StepRecord(int(step), _number(record, "loss", where),
                      _number(record, "tokens_per_s", where), _number(record, "lr", where),
                      _number(record, "grad_norm", where), tuple(ranks), attempt)


def parse_metrics_text(text: str, path: Path, attempt: str = "") -> list[StepRecord]:
    """All complete records of a metrics.jsonl text (a trailing partial line is skipped)."""
    lines = text.split("\n")
    if lines and lines[-1] != "":
        lines = lines[:-1]  # still being written: no newline yet
    return [parse_record(line, f"{path}:{number}", attempt)
            for number, line in enumerate(lines, start=1) if line.strip()]


def read_metrics(path: Path, attempt: str = "") -> list[StepRecord]:
    """metrics.jsonl -> records in file order."""
    require_regular_file(path, "a metrics.jsonl file")
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as err:
        raise UserInputError(f"{path}: cannot read ({err.strerror})") from None
    except UnicodeDecodeError as err:
        raise UserInputError(f"{path}: not UTF-8 text ({err.reason} at byte {err.start})"
                             ) from None
    return parse_metrics_text(text, path, attempt)


def merge_attempts(attempts: list[list[StepRecord]]) -> list[StepRecord]:
    """One trajectory from several attempts (oldest first): a later attempt's record of a
    step replaces an earlier one (a restart re-runs the steps after its checkpoint)."""
    by_step: dict[int, StepRecord] = {}
    for records in attempts:
        for record in records:
            by_step[record.step] = record
    return [by_step[s] for s in sorted(by_step)]


@dataclass(frozen=True)
class TraceEvent:
    """One complete ("X") event of trace.json."""

    rank: int
    """World rank (the event's pid)."""
    step: int
    """0-based step (args.step)."""
    name: str
    """E.g. "forward s0 mb1", "wait recv_grad s0 mb0"."""
    category: str
    """compute, comm or wait."""
    start_s: float
    """Start, seconds on the rank's clock."""
    end_s: float
    """End, seconds."""
    stage: int
    """Global pipeline stage."""
    micro_batch: int
    """Micro-batch index."""


def read_trace(path: Path) -> list[TraceEvent]:
    """trace.json -> its complete events (metadata events are skipped)."""
    require_regular_file(path, "a Chrome trace (trace.json)")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except OSError as err:
        raise UserInputError(f"{path}: cannot read ({err.strerror})") from None
    except UnicodeDecodeError as err:
        raise UserInputError(f"{path}: not UTF-8 text ({err.reason} at byte {err.start})"
                             ) from None
    except RecursionError:
        raise UserInputError(f"{path}: nested too deeply to be a Chrome trace") from None
    except json.JSONDecodeError as err:
        raise UserInputError(f"{path}: not a JSON trace ({err.msg} at line {err.lineno})"
                             ) from None
    raw = data.get("traceEvents") if isinstance(data, dict) else data
    if not isinstance(raw, list):
        raise UserInputError(f"{path}: expected a Chrome trace (traceEvents: a list)")
    events = []
    for index, event in enumerate(raw):
        where = f"{path}: traceEvents[{index}]"
        if not isinstance(event, dict):
            raise UserInputError(f"{where}: expected an object")
        if event.get("ph") != "X":
            continue
        args = event.get("args")
        if not isinstance(args, dict):
            raise UserInputError(f"{where}: args: expected an object with step/stage/micro_batch")
        start = _finite(event, "ts", where) / 1e6
        events.append(TraceEvent(
            rank=int(_finite(event, "pid", where, 0)), step=int(_finite(args, "step", where, 0)),
            name=str(event.get("name", "")), category=str(event.get("cat", "")),
            start_s=start, end_s=start + _finite(event, "dur", where, 0) / 1e6,
            stage=int(_finite(args, "stage", where, 0)),
            micro_batch=int(_finite(args, "micro_batch", where, 0)),
        ))
    return events
