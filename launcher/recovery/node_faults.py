"""The job's record of faulty nodes: ``<job dir>/node_faults.json`` and ``recoveries.jsonl``.

``node_faults.json`` maps each node a step failure was pinned on to its fault count, its
last fault and when; a node in it never runs another attempt of the job (in the allocation
or after a requeue). ``recoveries.jsonl`` holds one line per recovery (fault, culprits,
spares, what was done, when), read by ``gantry status``, the live view and the report.
"""

from __future__ import annotations

import json
import math
import os
import time
from pathlib import Path
from typing import Any

from launcher.atomic_write import write_text
from launcher.job_dir import NODE_FAULTS_FILE, RECOVERIES_FILE


class NodeFault:
    """One node's faults in this job: how many, the last one (``rank1-unresponsive``,
    ``node-lost``, ...) and when."""

    __slots__ = ("count", "last", "time")

    def __init__(self, count: int, last: str, time: float) -> None:
        self.count = count
        self.last = last
        self.time = time

    def __eq__(self, other: object) -> bool:
        return (isinstance(other, NodeFault)
                and (self.count, self.last, self.time) == (other.count, other.last, other.time))

    def __hash__(self) -> int:
        return hash((self.count, self.last, self.time))

    def __repr__(self) -> str:
        return f"NodeFault(count={self.count}, last={self.last!r}, time={self.time})"


def read_faults(job_dir: Path) -> dict[str, NodeFault]:
    """The job's faulty nodes; entries of another shape are ignored (a damaged file must not
    stop a recovery)."""
    try:
        data: Any = json.loads((job_dir / NODE_FAULTS_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError, UnicodeDecodeError):
        return {}
    faults: dict[str, NodeFault] = {}
    for node, entry in (data.items() if isinstance(data, dict) else []):
        if not isinstance(entry, dict):
            continue
        count, last, when = entry.get("count"), entry.get("last"), entry.get("time")
        if (isinstance(count, int) and not isinstance(count, bool) and count >= 1
                and isinstance(last, str) and isinstance(when, int | float)
                and not isinstance(when, bool) and math.isfinite(when)):
            faults[str(node)] = NodeFault(count, last, float(when))
    return faults


def add_faults(job_dir: Path, culprits: dict[str, str], now: float | None = None) -> \
        dict[str, NodeFault]:
    """Count one more fault on each culprit; returns the whole record as written."""
    faults = read_faults(job_dir)
    stamp = time.time() if now is None else now
    for node, what in culprits.items():
        before = faults.get(node)
        faults[node] = NodeFault((before.count if before else 0) + 1, what, stamp)
    write_text(job_dir / NODE_FAULTS_FILE, json.dumps(
        {n: {"count": f.count, "last": f.last, "time": f.time} for n, f in sorted(
            faults.items())}, indent=2) + "\n", mode=0o644)
    return faults


def append_recovery(job_dir: Path, record: dict[str, Any]) -> None:
    """One line in recoveries.jsonl (O_APPEND, fsync: lines are never torn)."""
    line = (json.dumps(record, sort_keys=True) + "\n").encode()
    fd = os.open(job_dir / RECOVERIES_FILE, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        os.write(fd, line)
        os.fsync(fd)
    finally:
        os.close(fd)


RECOVERIES_READ_LIMIT = 16 << 20
"""How much of recoveries.jsonl is read."""


def recovery_record(line: str) -> dict[str, Any] | None:
    """One line of recoveries.jsonl: the record, None for a torn or foreign line."""
    try:
        record = json.loads(line)
    except (ValueError, RecursionError):
        return None
    return record if isinstance(record, dict) else None


def read_recoveries(job_dir: Path) -> list[dict[str, Any]]:
    """Every recovery recorded for the job, oldest first; torn or foreign lines skipped."""
    try:
        with open(job_dir / RECOVERIES_FILE, encoding="utf-8", errors="replace") as handle:
            text = handle.read(RECOVERIES_READ_LIMIT)
    except OSError:
        return []
    return [record for line in text.splitlines()
            if (record := recovery_record(line)) is not None]


def describe_recovery(record: dict[str, Any]) -> str:
    """One line for ``gantry status`` and the live view: attempt, fault, culprit, spare,
    what was done and the seconds from the fault to that decision."""
    culprits = record.get("culprits")
    replaced = record.get("replaced")
    culprits = culprits if isinstance(culprits, dict) else {}
    replaced = replaced if isinstance(replaced, dict) else {}
    faults = ", ".join(f"{what} on {node}" for node, what in culprits.items()) or \
        "no node to blame"
    swaps = ", ".join(f"{new} for {old}" for old, new in replaced.items())
    decision = str(record.get("decision", "?"))
    done = {"relaunch": f"relaunched{' with ' + swaps if swaps else ' on the same nodes'}",
            "requeue": "requeued (no healthy spare left)",
            "stop": "stopped (no recovery left)"}.get(decision, decision)
    when, fault = record.get("time"), record.get("fault_time")
    took = (f", {float(when) - float(fault):.1f} s after the fault"
            if isinstance(when, int | float) and isinstance(fault, int | float) else "")
    return f"{record.get('attempt', '?')}: {faults}; {done}{took}"
