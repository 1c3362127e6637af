"""The checkpoints of a run, from the `checkpoint` events rank 0 appends to events.jsonl: which
steps were saved, how big, and where each save's time went (per phase, the most any writing
rank spent: copy to host memory, write + checksum, sync), for `gantry report`."""

from __future__ import annotations

import json
import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from launcher.job_dir import EVENTS_FILE


@dataclass(frozen=True)
class CheckpointRecord:
    """One completed checkpoint. The sizes and times are None in events of older trainers."""

    step: int
    completed_after_step: int
    bytes: int | None
    copy_s: float | None
    write_s: float | None
    sync_s: float | None

    def to_json(self) -> dict[str, Any]:
        return dict(self.__dict__)


def _number(event: dict[str, Any], key: str) -> float | None:
    value = event.get(key)
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) \
        else None


def read_checkpoints(run_dirs: tuple[Path, ...]) -> list[CheckpointRecord]:
    """Every attempt's checkpoint events, oldest attempt first. A line that is not a JSON
    object (one torn by a crash) or a checkpoint event without a step is skipped: the events
    only annotate the report."""
    found: list[CheckpointRecord] = []
    for run_dir in run_dirs:
        path = run_dir / EVENTS_FILE
        try:
            lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
        except OSError:
            continue
        for line in lines:
            try:
                event = json.loads(line)
            except ValueError:
                continue
            if not isinstance(event, dict) or event.get("event") != "checkpoint":
                continue
            step = event.get("step")
            if not isinstance(step, int):
                continue
            after = event.get("completed_after_step")
            size = event.get("bytes")
            found.append(CheckpointRecord(
                step, after if isinstance(after, int) else step,
                size if isinstance(size, int) and not isinstance(size, bool) else None,
                _number(event, "copy_s"), _number(event, "write_s"), _number(event, "sync_s")))
    return found


def _median(values: list[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return statistics.median(present) if present else None


def _amount(size: float) -> str:
    """Bytes in GB, MB or kB (decimal), two decimals."""
    for unit, scale in (("GB", 1e9), ("MB", 1e6)):
        if size >= scale:
            return f"{size / scale:.2f} {unit}"
    return f"{size / 1e3:.2f} kB"


def describe(records: list[CheckpointRecord]) -> str:
    """One line for the report's summary: the steps saved, then (when the events carry them)
    the median size and phase times per save and the write rate."""
    if not records:
        return "none recorded (no checkpoint.dir, or no save completed)"
    steps = ", ".join(str(r.step) for r in records)
    text = f"{len(records)} (steps {steps})"
    size = _median([None if r.bytes is None else float(r.bytes) for r in records])
    copy, write, sync = (_median([getattr(r, key) for r in records])
                         for key in ("copy_s", "write_s", "sync_s"))
    if size is not None and copy is not None and write is not None and sync is not None:
        rate = f", {_amount(size / (write + sync))}/s to disk" if write + sync > 0 else ""
        text += (f"; per save (median): {_amount(size)}, copy to host {copy:.2f} s, "
                 f"write + checksum {write:.2f} s, sync {sync:.2f} s{rate}")
    lags = [r.completed_after_step - r.step for r in records]
    if any(lags):
        text += f"; complete up to {max(lags)} step(s) after the save (background writes)"
    return text
