"""Hand-built job directories for the goodput tests: meta.json, the script's log lines, and
per attempt events.jsonl / metrics.jsonl written as gantry writes them."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from launcher.job_dir import (
    BY_ID_DIR,
    EVENTS_FILE,
    LOGS_DIR,
    META_FILE,
    METRICS_FILE,
    REPLAYED_METRICS_FILE,
    RUNS_DIR,
    log_file_name,
)

JOB = "7"
T0 = 1_796_288_400.0
"""2026-12-03T09:00:00Z."""


def stamp(t: float) -> str:
    """The script's log time of unix time ``t`` (milliseconds)."""
    whole = int(t)
    millis = round((t - whole) * 1000)
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(whole)) + f".{millis:03d}Z"


def job_dir(root: Path, submitted: float | None = T0, state: dict[str, Any] | None = None,
            name: str = "tiny") -> Path:
    path = root / f"{name}-dir"
    (path / LOGS_DIR).mkdir(parents=True)
    (path / RUNS_DIR).mkdir()
    meta: dict[str, Any] = {"name": name, "job_id": JOB, "created_at": T0 - 1}
    if submitted is not None:
        meta["submitted_at"] = submitted
    if state is not None:
        meta["last_state"] = state
    (path / META_FILE).write_text(json.dumps(meta))
    (root / BY_ID_DIR).mkdir(exist_ok=True)
    (root / BY_ID_DIR / JOB).symlink_to(Path("..") / path.name)
    return path


def log(path: Path, lines: list[tuple[float, str]]) -> None:
    with open(path / LOGS_DIR / log_file_name(JOB), "a", encoding="utf-8") as handle:
        for when, message in lines:
            handle.write(f"[gantry {stamp(when)}] {message}\n")
            handle.write("some output of the step\n")


def _append(path: Path, records: list[dict[str, Any]]) -> None:
    with open(path, "a", encoding="utf-8") as handle:
        for record in records:
            handle.write(json.dumps(record) + "\n")


def attempt(path: Path, name: str, start: float | None, steps: list[tuple[int, float, float]],
            end: tuple[float, float] | None = None, checkpoints: tuple[int, ...] = (),
            replayed: list[tuple[int, float]] | None = None, loss: float = 5.0) -> Path:
    """An attempt directory, and its loop's records in the job's run directory
    ``runs/<job name>/`` (where every attempt's `gantry train` writes): a start event at
    ``start``; ``steps``: (step, time, checkpoint_s) records; ``end``: (time, checkpoint_s)
    of the end event. Returns the attempt directory."""
    (path / RUNS_DIR / name).mkdir()
    run = path / RUNS_DIR / "tiny"
    run.mkdir(exist_ok=True)
    events: list[dict[str, Any]] = []
    if start is not None:
        events.append({"event": "start", "time": start, "step": 0, "resumed": False,
                       "nodes": ["n1", "n2"]})
    events += [{"event": "checkpoint", "time": (start or 0.0) + 0.001, "step": s, "copy_s": 0.1,
                "write_s": 0.2, "sync_s": 0.0, "bytes": 1000} for s in checkpoints]
    if end is not None:
        events.append({"event": "end", "time": end[0], "step": steps[-1][0] if steps else 0,
                       "checkpoint_s": end[1]})
    _append(run / EVENTS_FILE, events)
    ranks = [{"compute_s": 0.5, "send_s": 0.1, "recv_s": 0.1, "bubble_s": 0.2, "sync_s": 0.05,
              "total_s": 0.95}, {"compute_s": 0.6, "send_s": 0.1, "recv_s": 0.0,
                                 "bubble_s": 0.1, "sync_s": 0.05, "total_s": 0.85}]
    _append(run / METRICS_FILE, [
        {"step": s, "loss": loss - 0.1 * s, "lr": 3e-4, "grad_norm": 1.0, "time": t,
         "wall_s": t - (start or 0.0), "checkpoint_s": c, "tokens_per_s": 1000.0 + s,
         "ranks": ranks} for s, t, c in steps])
    if replayed:
        _append(run / REPLAYED_METRICS_FILE, [
            {"step": s, "loss": 1.0, "lr": 3e-4, "grad_norm": 1.0, "time": t,
             "tokens_per_s": 1.0, "ranks": ranks} for s, t in replayed])
    return path / RUNS_DIR / name
