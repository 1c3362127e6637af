"""The job's straggler findings, ``stragglers.jsonl``: written by rank 0 of `gantry train`,
read by `gantry status`, the live view and `gantry report`.

One JSON object a line, one per finding (launcher/train/straggler.py): a rank ``flagged`` as
slow, or ``cleared`` when it is back to pace. Fields: ``event`` (``straggler`` or
``straggler_cleared``), ``time`` (epoch s), ``attempt`` (the attempt directory's name),
``step``, ``rank``, ``node``, ``compute_s`` and ``reference_s`` (window medians of its
compute seconds and of its reference), ``ratio`` (window median of compute / reference),
``window`` (steps), ``basis`` (``peers``: the median of the other ranks of its stage
shape; ``model``: the cost model's figure), ``peers`` (ranks the reference came from),
``model_ratio`` (the ratio to the cost model, or null), ``threshold``, ``action`` (the
policy's ``warn`` or ``swap``) and ``swap`` (for a flagged rank under ``swap``: whether the
node's eviction was ``requested``, or why it was not; else null).

The file is the job directory's when the trainer runs in a gantry job ($GANTRY_JOB_DIR),
else the run directory's.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any

from launcher.job_dir import JOB_DIR_ENV, STRAGGLERS_FILE

FLAGGED = "straggler"
CLEARED = "straggler_cleared"
MAX_RECORDS = 10_000
"""Records read at most (a finding is one per rank per episode: a long file is damage)."""


def log_path(run_dir: Path) -> Path:
    """Where this run's findings go: the job directory's file, else the run directory's."""
    job = os.environ.get(JOB_DIR_ENV)
    return (Path(job) if job else run_dir) / STRAGGLERS_FILE


def append(path: Path, record: dict[str, Any]) -> None:
    with open(path, "a", encoding="utf-8") as handle:
        handle.write(json.dumps(record, sort_keys=True) + "\n")


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if math.isfinite(value) else None


def _valid(record: Any) -> bool:
    return (isinstance(record, dict) and record.get("event") in (FLAGGED, CLEARED)
            and all(_number(record.get(k)) is not None
                    for k in ("step", "rank", "compute_s", "reference_s", "ratio", "window")))


def read_stragglers(directory: Path) -> list[dict[str, Any]]:
    """The findings in ``directory``'s stragglers.jsonl, in order; lines that are damaged
    (not JSON, fields missing) are skipped, a missing file is no findings."""
    try:
        with open(directory / STRAGGLERS_FILE, "rb") as handle:
            lines = handle.read(16 * 1024 * 1024).decode("utf-8", errors="replace")
    except OSError:
        return []
    records = []
    for line in lines.splitlines()[:MAX_RECORDS]:
        try:
            record = json.loads(line)
        except (ValueError, RecursionError):
            continue
        if _valid(record):
            records.append(record)
    return records


def seconds(value: float) -> str:
    """``1.25 s``, ``112 ms``, ``0.0553 ms``: three significant digits."""
    return f"{value:.3g} s" if abs(value) >= 1.0 else f"{value * 1e3:.3g} ms"


def describe(record: dict[str, Any]) -> str:
    """One line, e.g. ``n3 (rank 2) slow at step 13: compute 112 ms vs 10.1 ms, the median
    of its 1 same-shape peer: 11.09x over 5 steps (threshold 1.20x); warn``."""
    who = f"{record.get('node') or '?'} (rank {int(record['rank'])})"
    ratio, window = float(record["ratio"]), int(record["window"])
    if record["event"] == CLEARED:
        return f"{who} back to pace at step {int(record['step'])}: {ratio:.2f}x over " \
               f"{window} steps"
    peers = int(_number(record.get("peers")) or 0)
    plural = "" if peers == 1 else "s"
    basis = (f"the median of its {peers} same-shape peer{plural}"
             if record.get("basis") == "peers"
             else f"the cost model's figure from {peers} other rank{plural}")
    threshold = _number(record.get("threshold"))
    limit = f" (threshold {threshold:.2f}x)" if threshold is not None else ""
    action = str(record.get("action") or "warn")
    swap = record.get("swap")
    if action == "swap":
        action = f"swap {swap}" if isinstance(swap, str) and swap else "swap"
    return (f"{who} slow at step {int(record['step'])}: compute "
            f"{seconds(float(record['compute_s']))} vs {seconds(float(record['reference_s']))}, "
            f"{basis}: {ratio:.2f}x over {window} steps{limit}; {action}")
