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

from launcher.errors import UserInputError, brief
from topology.user_files import require_regular_file

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


MAX_MAGNITUDE = 1e100
"""Largest magnitude of a finite number read: no measurement of a run comes near it (float32,
in which the trainer computes, ends at 3.4e38), and the plots overflow near 1.8e308."""
MAX_INDEX = 2**31 - 1
"""Largest step, rank, stage or micro-batch number (MPI ranks and Slurm's counts are int32)."""


def _number(record: dict[str, Any], key: str, where: str, low: float | None = None,
            diverged_ok: bool = False) -> float:
    """A finite number of magnitude at most MAX_MAGNITUDE (and >= ``low`` when given); with
    ``diverged_ok`` also NaN or +-Infinity (what the trainer writes for a loss or gradient
    norm that diverged)."""
    value = record.get(key)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise UserInputError(f"{where}: {key}: {brief(value)} is not allowed (expected a number)")
    non_finite = isinstance(value, float) and not math.isfinite(value)
    too_large = not non_finite and abs(value) > MAX_MAGNITUDE  # an int past float's range too
    if (non_finite and diverged_ok) or (
            not non_finite and not too_large and (low is None or value >= low)):
        return float(value)
    shown = repr(float(value)) if not too_large or isinstance(value, float) else (
        f"an integer of {len(str(abs(value)))} digits")
    bound = f" >= {low:g}" if low is not None else ""
    if too_large:
        bound += f" of magnitude at most {MAX_MAGNITUDE:g}"
    also = ", NaN or Infinity" if diverged_ok else ""
    raise UserInputError(f"{where}: {key}: {shown} is not allowed (expected a finite number"
                         f"{bound}{also})")


def _finite(record: dict[str, Any], key: str, where: str, low: float | None = None) -> float:
    """A finite number (>= ``low`` when given): a trace's times and ids."""
    return _number(record, key, where, low)


def _index(record: dict[str, Any], key: str, where: str, low: int = 0) -> int:
    """A step, rank, stage or micro-batch number: low .. MAX_INDEX (a fraction is cut)."""
    value = _finite(record, key, where, low)
    if value > MAX_INDEX:
        raise UserInputError(f"{where}: {key}: {value:.3g} is not allowed (expected at most "
                             f"{MAX_INDEX})")
    return int(value)


def _json(text: str, where: str, kind: str, what: str, lines: bool = False) -> Any:
    """``text`` parsed; one UserInputError naming ``where`` for what json cannot read: "not
    ``kind``" for a syntax error (with its line when ``lines``), "nested too deeply to be
    ``what``"."""
    try:
        return json.loads(text)
    except json.JSONDecodeError as err:
        at = f" at line {err.lineno}" if lines else ""
        raise UserInputError(f"{where}: not {kind} ({err.msg}{at})") from None
    except ValueError:  # an integer of more than 4,300 digits (int()'s limit)
        raise UserInputError(f"{where}: not {kind} gantry can read (a number of more than "
                             "4,300 digits)") from None
    except RecursionError:
        raise UserInputError(f"{where}: nested too deeply to be {what}") from None


def parse_record(text: str, where: str, attempt: str = "") -> StepRecord:
    """One metrics line -> StepRecord (UserInputError naming ``where`` when malformed)."""
    record = _json(text, where, "JSON", "a metrics record")
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
    if step != int(step) or not 1 <= step <= MAX_INDEX:
        raise UserInputError(f"{where}: step: {brief(record['step'])} is not allowed "
                             f"(expected an integer 1 .. {MAX_INDEX})")
    return StepRecord(int(step), _number(record, "loss", where, diverged_ok=True),
                      _number(record, "tokens_per_s", where), _number(record, "lr", where),
                      _number(record, "grad_norm", where, diverged_ok=True), tuple(ranks),
                      attempt)


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
        text = path.read_text(encoding="utf-8")
    except OSError as err:
        raise UserInputError(f"{path}: cannot read ({err.strerror})") from None
    except UnicodeDecodeError as err:
        raise UserInputError(f"{path}: not UTF-8 text ({err.reason} at byte {err.start})"
                             ) from None
    data = _json(text, str(path), "a JSON trace", "a Chrome trace", lines=True)
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
            rank=_index(event, "pid", where), step=_index(args, "step", where),
            name=str(event.get("name", "")), category=str(event.get("cat", "")),
            start_s=start, end_s=start + _finite(event, "dur", where, 0) / 1e6,
            stage=_index(args, "stage", where),
            micro_batch=_index(args, "micro_batch", where),
        ))
    return events
