"""Per-step metrics (JSONL, rank 0), run events (start/stop, JSONL) and per-rank trace events
(Chrome trace JSON, Perfetto).

On resume from step S, records of steps after S (run by an attempt that was interrupted
before checkpointing them) move to metrics.replayed.jsonl, so metrics.jsonl stays the one
trajectory of the run.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from launcher.atomic_write import WriteError, as_run_failure, write_text
from launcher.job_dir import METRICS_FILE, REPLAYED_METRICS_FILE
from launcher.schedules import Op

_NAMES = {int(op): op.name.lower() for op in Op}


def set_aside_after(run_dir: Path, step: int) -> int:
    """Moves records with "step" > ``step`` from metrics.jsonl to metrics.replayed.jsonl;
    returns how many moved. A last line cut off by a crash (no newline) moves too, so the
    next record is not appended onto it; bytes that are not UTF-8 are kept as replacement
    characters (a resume never fails on its own log)."""
    path = run_dir / METRICS_FILE
    if not path.is_file():
        return 0
    text = path.read_bytes().decode("utf-8", errors="replace")
    lines = text.splitlines()
    cut_off = lines.pop() if lines and not text.endswith(("\n", "\r")) else None
    kept: list[str] = []
    moved: list[str] = []
    for line in lines:
        if not line.strip():
            continue
        try:
            later = int(json.loads(line)["step"]) > step
        except (ValueError, KeyError, TypeError, RecursionError):
            later = False  # not ours to judge: keep it where it was
        (moved if later else kept).append(line)
    if cut_off is not None:
        moved.append(cut_off)
    if moved:
        with open(run_dir / REPLAYED_METRICS_FILE, "a", encoding="utf-8") as handle:
            handle.write("".join(f"{line}\n" for line in moved))
        try:
            write_text(path, "".join(f"{line}\n" for line in kept))
        except WriteError as err:
            raise as_run_failure(err) from None
    return len(moved)


def append_jsonl(path: Path, record: dict[str, Any]) -> None:
    with open(path, "a", encoding="utf-8") as handle:
        handle.write(json.dumps(record, sort_keys=True) + "\n")


def trace_events(rank: int, step: int, t_offset: float,
                 spans: list[tuple[int, int, int, float, float]]) -> list[dict[str, Any]]:
    """Chrome 'complete' events: compute spans, sends, and blocked receive waits."""
    events = []
    for op, stage, mb, t0, t1 in spans:
        if op < 0:
            name = f"wait {_NAMES.get(-op, '?')}"
            category = "wait"
        else:
            name = _NAMES.get(op, "?")
            category = "compute" if op <= int(Op.WEIGHT) else "comm"
        events.append({
            "name": f"{name} s{stage} mb{mb}", "cat": category, "ph": "X", "pid": rank,
            "tid": 0, "ts": (t_offset + t0) * 1e6, "dur": max(t1 - t0, 0.0) * 1e6,
            "args": {"step": step, "stage": stage, "micro_batch": mb},
        })
    return events


def write_trace(path: Path, events: list[dict[str, Any]], ranks: int) -> None:
    meta = [{"name": "process_name", "ph": "M", "pid": r, "args": {"name": f"rank {r}"}}
            for r in range(ranks)]
    try:
        write_text(path, json.dumps({"traceEvents": meta + events, "displayTimeUnit": "ms"}))
    except WriteError as err:
        raise as_run_failure(err) from None
