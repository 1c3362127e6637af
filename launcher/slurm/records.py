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
import math
from collections.abc import Mapping
from typing import Any, NamedTuple

from launcher.errors import GantryError, brief
from topology.errors import TopologyInputError
from topology.slurm_version import SlurmVersion
from topology.whole_numbers import read_whole

#: Job states after which the job will not run again (unless requeued by someone).
TERMINAL_STATES = frozenset({
    "BOOT_FAIL", "CANCELLED", "COMPLETED", "DEADLINE", "FAILED", "NODE_FAIL",
    "OUT_OF_MEMORY", "PREEMPTED", "TIMEOUT", "REVOKED", "SPECIAL_EXIT",
})


class SlurmParseError(GantryError):
    """Slurm printed something gantry cannot read."""


class JobInfo(NamedTuple):
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


class NodeInfo(NamedTuple):
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


_STATE_MARKS = (("MAINTENANCE", "$"), ("REBOOT_REQUESTED", "@"), ("REBOOT_ISSUED", "^"),
                ("POWERING_UP", "#"), ("POWERING_DOWN", "%"), ("POWERED_DOWN", "~"),
                ("POWER_DOWN", "!"), ("NOT_RESPONDING", "*"))
"""State flag -> the mark sinfo puts after a state word; the first flag present wins."""


def sinfo_state(node: NodeInfo) -> str:
    """The node's state in the words ``sinfo -o %T`` uses ("idle", "mixed", "allocated",
    "drained", "draining", "down*", "inval", ...), from its JSON record: drain and fail
    name the state, a busy node is draining/failing, one mark for maintenance, reboot,
    power or no response."""
    flags = set(node.flags)
    if "INVALID_REG" in flags:
        return "inval"
    mark = next((sign for flag, sign in _STATE_MARKS if flag in flags), "")
    completing = "COMPLETING" in flags
    if node.drained:
        word = "draining" if completing or node.state in ("ALLOCATED", "MIXED") else "drained"
    elif "FAIL" in flags:
        word = "failing" if completing or node.state == "ALLOCATED" else "fail"
    elif "MAINTENANCE" in flags and node.state not in ("ALLOCATED", "MIXED", "DOWN"):
        return "maint*" if "NOT_RESPONDING" in flags else "maint"
    elif completing and node.state == "ALLOCATED":
        word = "allocated" if mark else "allocated+"
    elif completing and node.state != "DOWN":
        word = "completing"
    else:
        word = node.state.lower()
    return word + mark


def number(value: Any) -> int | None:
    """An integer from a 22.05 int/null or a 23.02+ ``{"set","infinite","number"}`` object;
    None for unset, unlimited, or anything that is not a whole number (NaN, infinity, a list,
    a string of other than 1-18 ASCII digits): it never raises."""
    if isinstance(value, Mapping):
        if not value.get("set", True) or value.get("infinite", False):
            return None
        value = value.get("number")  # one level only: Slurm never nests these
    if value is None or isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float):
        return int(value) if math.isfinite(value) else None
    if isinstance(value, str):
        text = value.strip()
        magnitude = read_whole(text.removeprefix("-"))
        if magnitude is None:
            return None
        return -magnitude if text.startswith("-") else magnitude
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
        status_list = [status] if isinstance(status, str) else (
            list(status) if isinstance(status, list) else [])
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


def _kind(value: Any) -> str:
    """A JSON value's kind in words, for messages."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    return "a list" if isinstance(value, list) else "an object"


def _object(value: Any, where: str) -> Mapping[str, Any]:
    """``value`` when it is a JSON object; null reads as an empty one."""
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise SlurmParseError(f"{where}: expected an object, got {_kind(value)}")
    return value


def _text(value: Any, where: str) -> str:
    """A string field; null reads as "", a number as its digits."""
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    if isinstance(value, int | float) and not isinstance(value, bool):
        return str(value)
    raise SlurmParseError(f"{where}: expected a string, got {_kind(value)}")


def _records(data: Mapping[str, Any], key: str, what: str) -> list[Mapping[str, Any]]:
    """The list of objects under ``key`` (missing or null: none)."""
    raw = data.get(key)
    if raw is None:
        return []
    if not isinstance(raw, list):
        raise SlurmParseError(f"{what}: {key}: expected a list, got {_kind(raw)}")
    for index, item in enumerate(raw):
        if not isinstance(item, Mapping):
            raise SlurmParseError(f"{what}: {key}[{index}]: expected an object, got "
                                  f"{_kind(item)}")
    return raw


def _load(text: str, what: str) -> Mapping[str, Any]:
    try:
        data = json.loads(text)
    except json.JSONDecodeError as err:
        raise SlurmParseError(f"{what}: not JSON ({err.msg} at line {err.lineno})") from None
    except ValueError:  # an integer past int()'s 4,300-digit limit
        raise SlurmParseError(f"{what}: not JSON gantry can read (a number of more than "
                              "4,300 digits)") from None
    except RecursionError:
        raise SlurmParseError(f"{what}: nested too deeply to be Slurm's JSON") from None
    if not isinstance(data, Mapping):
        raise SlurmParseError(f"{what}: expected a JSON object, got {_kind(data)}")
    errors = data.get("errors")
    if errors is None or errors == []:
        return data
    if not isinstance(errors, list):
        raise SlurmParseError(f"{what}: errors: expected a list, got {_kind(errors)}")
    first = errors[0]
    detail = (first.get("description") or first.get("error")) if isinstance(
        first, Mapping) else first
    shown = detail if isinstance(detail, str) and detail else brief(first)
    raise SlurmParseError(f"{what}: Slurm reported an error: {shown}")


def _job_id(raw: Mapping[str, Any]) -> str:
    job_id = number(raw.get("job_id"))
    array_job = number(raw.get("array_job_id"))
    task = number(raw.get("array_task_id"))
    if array_job and task is not None:
        return f"{array_job}_{task}"
    return str(job_id)


def job_from_squeue(raw: Mapping[str, Any], what: str = "squeue --json") -> JobInfo:
    """One entry of ``squeue --json`` (or ``scontrol --json show job``) ``jobs``;
    SlurmParseError naming ``what`` and the field when a field has the wrong shape."""
    state, flags = states(raw.get("job_state"))
    code, signal = exit_status(raw.get("exit_code"))
    if state in {"PENDING", "RUNNING", "CONFIGURING", "SUSPENDED"}:
        code, signal = None, None

    def text(key: str) -> str:
        return _text(raw.get(key), f"{what}: {key}")

    return JobInfo(
        job_id=_job_id(raw), name=text("name"), state=state, flags=flags,
        reason=text("state_reason"), nodes=text("nodes"),
        node_count=number(raw.get("node_count")), partition=text("partition"),
        time_limit_min=number(raw.get("time_limit")), submit_time=_time(raw.get("submit_time")),
        start_time=_time(raw.get("start_time")), end_time=_time(raw.get("end_time")),
        exit_code=code, signal=signal, restarts=number(raw.get("restart_cnt")) or 0,
        stdout=text("standard_output"), stderr=text("standard_error"),
        dependency=text("dependency"),
    )


def job_from_sacct(raw: Mapping[str, Any], what: str = "sacct --json") -> JobInfo:
    """One entry of ``sacct --json`` ``jobs`` (22.05 or 24.11)."""
    state_raw = raw.get("state")
    state_obj = state_raw if isinstance(state_raw, Mapping) else None
    state, flags = states(state_obj.get("current") if state_obj is not None else state_raw)
    times = _object(raw.get("time"), f"{what}: time")
    code, signal = exit_status(raw.get("exit_code"))
    return JobInfo(
        job_id=_job_id(raw), name=_text(raw.get("name"), f"{what}: name"), state=state,
        flags=flags,
        reason=_text(state_obj.get("reason"), f"{what}: state.reason") if state_obj else "",
        nodes=_text(raw.get("nodes"), f"{what}: nodes"),
        partition=_text(raw.get("partition"), f"{what}: partition"),
        time_limit_min=number(times.get("limit")), submit_time=_time(times.get("submission")),
        start_time=_time(times.get("start")), end_time=_time(times.get("end")),
        exit_code=code, signal=signal,
        restarts=number(raw.get("restart_cnt")) or 0,
    )


def parse_squeue(text: str) -> list[JobInfo]:
    """All jobs of a ``squeue --json`` document."""
    what = "squeue --json"
    data = _load(text, what)
    return [job_from_squeue(raw, f"{what}: jobs[{index}]")
            for index, raw in enumerate(_records(data, "jobs", what))]


def parse_sacct(text: str) -> list[JobInfo]:
    """All jobs of a ``sacct --json`` document (the last record wins for requeued jobs)."""
    what = "sacct --json"
    data = _load(text, what)
    return [job_from_sacct(raw, f"{what}: jobs[{index}]")
            for index, raw in enumerate(_records(data, "jobs", what))]


def node_from_json(raw: Mapping[str, Any], what: str = "node list") -> NodeInfo:
    """One node of ``sinfo --json`` (22.05) or ``scontrol --json show nodes`` (23.02+);
    SlurmParseError naming ``what`` and the field when a field has the wrong shape."""
    state, flags = states(raw.get("state"))
    raw_flags = raw.get("state_flags")
    if isinstance(raw_flags, str):
        extra = states(f"X+{raw_flags}")[1]
    elif raw_flags is None or isinstance(raw_flags, list):
        extra = tuple(str(f).upper() for f in raw_flags or [])
    else:
        raise SlurmParseError(f"{what}: state_flags: expected a list, got {_kind(raw_flags)}")
    name = raw.get("name")
    if name is not None and not isinstance(name, str):
        raise SlurmParseError(f"{what}: name: expected a string, got {_kind(name)}")
    return NodeInfo(
        name=name or "", state=state, flags=flags + extra,
        reason=_text(raw.get("reason"), f"{what}: reason"),
        reason_user=_text(raw.get("reason_set_by_user"), f"{what}: reason_set_by_user"),
    )


def parse_nodes(text: str, what: str = "node list") -> list[NodeInfo]:
    """All nodes of a node-list JSON document (``{"nodes": [...]}``); ``what`` (the command
    that printed it) names it in errors."""
    data = _load(text, what)
    if "nodes" not in data:
        raise SlurmParseError(f"{what}: no 'nodes' key (expected sinfo/scontrol --json)")
    if not isinstance(data["nodes"], list):
        raise SlurmParseError(f"{what}: nodes: expected a list, got {_kind(data['nodes'])}")
    return [node_from_json(raw, f"{what}: nodes[{index}]")
            for index, raw in enumerate(_records(data, "nodes", what))]


def meta_version(text: str) -> tuple[int, int, int] | None:
    """The Slurm version in a JSON document's ``meta`` (22.05 ints or 24.11 strings); None
    when the document has none readable."""
    data = _load(text, "slurm json")
    meta = data.get("meta")
    slurm = (meta.get("Slurm") or meta.get("slurm")) if isinstance(meta, Mapping) else None
    version = slurm.get("version") if isinstance(slurm, Mapping) else None
    if not isinstance(version, Mapping):
        return None
    parts = [number(version.get(key)) for key in ("major", "minor", "micro")]
    if any(part is None or part < 0 for part in parts):
        return None
    return parts[0] or 0, parts[1] or 0, parts[2] or 0


def parse_version(text: str, what: str | None = None) -> tuple[int, int, int]:
    """(major, minor, micro) from a tool's version output ("slurm 22.05.8"), read by the one
    version reader, :meth:`topology.slurm_version.SlurmVersion.parse`; ``what`` (the
    command) names it in errors."""
    try:
        version = SlurmVersion.parse(text)
    except TopologyInputError:
        prefix = f"{what}: " if what else ""
        raise SlurmParseError(
            f"{prefix}cannot read a Slurm version from {brief(text.strip())}") from None
    return version.major, version.minor, version.micro
