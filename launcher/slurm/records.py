"""Job and node records parsed from Slurm's JSON, for both the 22.05 and the 24.11 shapes.

Differences handled here (and only here):

- ``job_state``: a string ("RUNNING") in 22.05, a list (["RUNNING", "COMPLETING"]) in 24.11.
- numbers: plain ints (null for unset/unlimited) in 22.05; ``{"set": .., "infinite": ..,
  "number": ..}`` in 23.02+.
- ``exit_code``: a raw wait status (768 = exit 3, 15 = signal 15) in 22.05; ``{"status": [..],
  "return_code": {..}, "signal": {"id": {..}, "name": ..}}`` in 24.11.
- nodes: ``sinfo --json`` lists nodes with ``state`` "idle" + ``state_flags`` ["DRAIN"] in
  22.05; ``scontrol --json show nodes`` lists ``state`` ["IDLE", "DRAIN"] in 24.11.
- sacct: ``state.current`` a string in 22.05, a list in 24.11; times under ``time``.
- version: ``meta.Slurm.version`` ints in 22.05, ``meta.slurm.version`` strings in 24.11.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from launcher.errors import GantryError

#: Job states after which the job will not run again (unless requeued by someone).
TERMINAL_STATES = frozenset({
    "BOOT_FAIL", "CANCELLED", "COMPLETED", "DEADLINE", "FAILED", "NODE_FAIL",
    "OUT_OF_MEMORY", "PREEMPTED", "TIMEOUT", "REVOKED", "SPECIAL_EXIT",
})


class SlurmParseError(GantryError):
    """Slurm printed something gantry cannot read."""


@dataclass(frozen=True)
class JobInfo:
    """One job as Slurm reports it, normalised across versions."""

    job_id: str
    """Job id (array tasks as "123_4")."""
    name: str
    """Job name."""
    state: str
    """Base state, upper case: PENDING, RUNNING, COMPLETED, FAILED, CANCELLED, ..."""
    flags: tuple[str, ...] = ()
    """Extra state flags (COMPLETING, REQUEUED, ...) in 24.11."""
    reason: str = ""
    """Why pending or why it ended ("None" when there is nothing to say)."""
    nodes: str = ""
    """Allocated nodes as a hostlist ("" while pending)."""
    node_count: int | None = None
    """Number of nodes (requested or allocated)."""
    partition: str = ""
    """Partition."""
    time_limit_min: int | None = None
    """Time limit in minutes; None for unlimited or unknown."""
    submit_time: int | None = None
    """Unix time of submission."""
    start_time: int | None = None
    """Unix time it started (or is expected to); None if unknown."""
    end_time: int | None = None
    """Unix time it ended (or will at the latest); None if unknown."""
    exit_code: int | None = None
    """Exit status of the batch script; None when not ended or killed by a signal."""
    signal: int | None = None
    """Signal that ended the batch script, if any."""
    restarts: int = 0
    """How many times it was requeued."""
    stdout: str = ""
    """Standard output path as Slurm holds it (may contain %j patterns)."""
    stderr: str = ""
    """Standard error path."""
    dependency: str = ""
    """Dependency expression (with Slurm's (unfulfilled) annotations)."""

    @property
    def terminal(self) -> bool:
        """True when the job ended and will not run again by itself."""
        return self.state in TERMINAL_STATES and "REQUEUED" not in self.flags

    def to_json(self) -> dict[str, Any]:
        """A plain dict for ``--json`` output and the job directory."""
        return {
            "job_id": self.job_id, "name": self.name, "state": self.state,
            "flags": list(self.flags), "reason": self.reason, "nodes": self.nodes,
            "node_count": self.node_count, "partition": self.partition,
            "time_limit_min": self.time_limit_min, "submit_time": self.submit_time,
            "start_time": self.start_time, "end_time": self.end_time,
            "exit_code": self.exit_code, "signal": self.signal, "restarts": self.restarts,
            "stdout": self.stdout, "stderr": self.stderr, "dependency": self.dependency,
            "terminal": self.terminal,
        }


@dataclass(frozen=True)
class NodeInfo:
    """One node as Slurm reports it, normalised across versions."""

    name: str
    """Node name."""
    state: str
    """Base state, upper case: IDLE, MIXED, ALLOCATED, DOWN, ..."""
    flags: tuple[str, ...] = ()
    """State flags, upper case: DRAIN, NOT_RESPONDING, ..."""
    reason: str = ""
    """Admin reason (drain/down), "" if none."""
    reason_user: str = ""
    """Who set the reason."""

    @property
    def drained(self) -> bool:
        """True when the node is draining or drained."""
        return "DRAIN" in self.flags or self.state in {"DRAIN", "DRAINED", "DRAINING"}

    @property
    def usable(self) -> bool:
        """True when new jobs can be scheduled on the node."""
        bad_flags = {"DRAIN", "NOT_RESPONDING", "FAIL", "MAINTENANCE", "REBOOT_REQUESTED",
                     "REBOOT_ISSUED", "POWERED_DOWN", "POWERING_DOWN", "RESERVED",
                     "INVALID_REG"}
        return self.state in {"IDLE", "MIXED", "ALLOCATED", "COMPLETING"} and not (
            bad_flags & set(self.flags))

    def to_json(self) -> dict[str, Any]:
        """A plain dict for ``--json`` output."""
        return {"name": self.name, "state": self.state, "flags": list(self.flags),
                "reason": self.reason, "reason_user": self.reason_user,
                "drained": self.drained, "usable": self.usable}


def number(value: Any) -> int | None:
    """An integer from a 22.05 int/null or a 23.02+ ``{"set","infinite","number"}`` object."""
    if value is None or isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        return int(value)
    if isinstance(value, Mapping):
        if not value.get("set", True) or value.get("infinite", False):
            return None
        return number(value.get("number"))
    if isinstance(value, str) and value.strip().lstrip("-").isdigit():
        return int(value)
    return None


def _time(value: Any) -> int | None:
    """A Unix time; 0 (Slurm's "unknown") becomes None."""
    seconds = number(value)
    return seconds if seconds else None


def states(value: Any) -> tuple[str, tuple[str, ...]]:
    """(base state, flags) from a 22.05 string or a 24.11 list; upper case."""
    if isinstance(value, str):
        parts = [p for p in value.replace(",", " ").replace("+", " ").split() if p]
    elif isinstance(value, list):
        parts = [str(p) for p in value]
    else:
        parts = []
    parts = [p.upper() for p in parts]
    if not parts:
        return "UNKNOWN", ()
    return parts[0], tuple(parts[1:])


def exit_status(value: Any) -> tuple[int | None, int | None]:
    """(exit code, signal) from a 22.05 wait status or a 24.11 verbose exit code object."""
    if isinstance(value, Mapping):
        status = value.get("status")
        status_list = [status] if isinstance(status, str) else list(status or [])
        signal_obj = value.get("signal")
        signal = number(signal_obj.get("id")) if isinstance(signal_obj, Mapping) else None
        code = number(value.get("return_code"))
        if "SIGNALED" in status_list and signal:
            return None, signal
        return code, (signal or None)
    raw = number(value)
    if raw is None:
        return None, None
    if raw & 0x7F:
        return None, raw & 0x7F
    return (raw >> 8) & 0xFF, None


def _load(text: str, what: str) -> Mapping[str, Any]:
    try:
        data = json.loads(text)
    except json.JSONDecodeError as err:
        raise SlurmParseError(f"{what}: not JSON ({err.msg} at line {err.lineno})") from None
    if not isinstance(data, Mapping):
        raise SlurmParseError(f"{what}: expected a JSON object")
    errors = data.get("errors") or []
    if errors:
        first = errors[0]
        detail = first.get("description") or first.get("error") if isinstance(
            first, Mapping) else str(first)
        raise SlurmParseError(f"{what}: Slurm reported an error: {detail}")
    return data


def _job_id(raw: Mapping[str, Any]) -> str:
    job_id = number(raw.get("job_id"))
    array_job = number(raw.get("array_job_id"))
    task = number(raw.get("array_task_id"))
    if array_job and task is not None:
        return f"{array_job}_{task}"
    return str(job_id)


def job_from_squeue(raw: Mapping[str, Any]) -> JobInfo:
    """One entry of ``squeue --json`` (or ``scontrol --json show job``) ``jobs``."""
    state, flags = states(raw.get("job_state"))
    code, signal = exit_status(raw.get("exit_code"))
    if state in {"PENDING", "RUNNING", "CONFIGURING", "SUSPENDED"}:
        code, signal = None, None
    return JobInfo(
        job_id=_job_id(raw), name=str(raw.get("name", "")), state=state, flags=flags,
        reason=str(raw.get("state_reason", "") or ""), nodes=str(raw.get("nodes", "") or ""),
        node_count=number(raw.get("node_count")), partition=str(raw.get("partition", "")),
        time_limit_min=number(raw.get("time_limit")), submit_time=_time(raw.get("submit_time")),
        start_time=_time(raw.get("start_time")), end_time=_time(raw.get("end_time")),
        exit_code=code, signal=signal, restarts=number(raw.get("restart_cnt")) or 0,
        stdout=str(raw.get("standard_output", "") or ""),
        stderr=str(raw.get("standard_error", "") or ""),
        dependency=str(raw.get("dependency", "") or ""),
    )


def job_from_sacct(raw: Mapping[str, Any]) -> JobInfo:
    """One entry of ``sacct --json`` ``jobs`` (22.05 or 24.11)."""
    state_obj = raw.get("state") or {}
    state, flags = states(state_obj.get("current") if isinstance(state_obj, Mapping) else state_obj)
    times = raw.get("time") or {}
    code, signal = exit_status(raw.get("exit_code"))
    return JobInfo(
        job_id=_job_id(raw), name=str(raw.get("name", "")), state=state, flags=flags,
        reason=str(state_obj.get("reason", "") if isinstance(state_obj, Mapping) else ""),
        nodes=str(raw.get("nodes", "") or ""), partition=str(raw.get("partition", "")),
        time_limit_min=number(times.get("limit")), submit_time=_time(times.get("submission")),
        start_time=_time(times.get("start")), end_time=_time(times.get("end")),
        exit_code=code, signal=signal,
        restarts=number(raw.get("restart_cnt")) or 0,
    )


def parse_squeue(text: str) -> list[JobInfo]:
    """All jobs of a ``squeue --json`` document."""
    data = _load(text, "squeue --json")
    return [job_from_squeue(raw) for raw in data.get("jobs", [])]


def parse_sacct(text: str) -> list[JobInfo]:
    """All jobs of a ``sacct --json`` document (the last record wins for requeued jobs)."""
    data = _load(text, "sacct --json")
    return [job_from_sacct(raw) for raw in data.get("jobs", [])]


def node_from_json(raw: Mapping[str, Any]) -> NodeInfo:
    """One node of ``sinfo --json`` (22.05) or ``scontrol --json show nodes`` (23.02+)."""
    state, flags = states(raw.get("state"))
    extra = tuple(str(f).upper() for f in raw.get("state_flags", []) or [])
    return NodeInfo(
        name=str(raw.get("name", "")), state=state, flags=flags + extra,
        reason=str(raw.get("reason", "") or ""),
        reason_user=str(raw.get("reason_set_by_user", "") or ""),
    )


def parse_nodes(text: str) -> list[NodeInfo]:
    """All nodes of a node-list JSON document (``{"nodes": [...]}``)."""
    data = _load(text, "node list")
    if "nodes" not in data:
        raise SlurmParseError("node list: no 'nodes' key (expected sinfo/scontrol --json)")
    return [node_from_json(raw) for raw in data["nodes"]]


def meta_version(text: str) -> tuple[int, int, int] | None:
    """The Slurm version in a JSON document's ``meta`` (22.05 ints or 24.11 strings)."""
    data = _load(text, "slurm json")
    meta = data.get("meta") or {}
    slurm = meta.get("Slurm") or meta.get("slurm") or {}
    version = slurm.get("version") or {}
    try:
        return (int(version["major"]), int(version["minor"]), int(version["micro"]))
    except (KeyError, TypeError, ValueError):
        return None


def parse_version(text: str) -> tuple[int, int, int]:
    """(major, minor, micro) from ``sbatch --version`` output ("slurm 22.05.8")."""
    words = text.strip().split()
    if len(words) >= 2:
        parts = words[-1].split("-")[0].split(".")
        if len(parts) >= 2 and all(p.isdigit() for p in parts[:3]):
            padded = [*parts[:3], "0", "0"][:3]
            return int(padded[0]), int(padded[1]), int(padded[2])
    raise SlurmParseError(f"cannot read a Slurm version from {text.strip()!r}")
