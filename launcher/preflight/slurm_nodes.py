"""The few Slurm calls the gate and health checks make: node records, drain, resume, requeue.

Node records come from Slurm's JSON (``scontrol --json show nodes`` from 23.02 on, ``sinfo
--json`` before), whose reason is a field of its own. Only where the JSON call fails is the
``scontrol show node -o`` line read, by its known keys and never out of free text: a
record whose reason cannot be told apart from a ``Comment=``/``Extra=`` text, or a node
name seen twice (a reason with a line break can forge a line), has an unreadable reason,
which counts as an operator's. Every ``scontrol update`` of a node is preceded by a fresh
read of that node and happens only when its reason is still gantry's own or none
(:mod:`launcher.preflight.drain_reason`). Tools found by the one tool rule
(:mod:`launcher.slurm.tools`: GANTRY_SCONTROL / GANTRY_SINFO / GANTRY_SQUEUE, else
GANTRY_SLURM_BIN_DIR, else PATH) and run by :func:`launcher.slurm.runner.run_slurm`;
arguments as an argv list (no shell), so a reason with spaces stays one argument.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from launcher.errors import GantryError
from launcher.preflight.drain_policy import NodeState
from launcher.preflight.drain_reason import is_gantry_reason
from launcher.process_runner import ToolOutput
from launcher.slurm.records import SlurmParseError, number, parse_nodes, parse_version
from launcher.slurm.runner import run_slurm
from launcher.slurm.tools import how_to_point_at, tool_path
from topology import hostlists

UNREADABLE_REASON = "(reason not readable from scontrol's text; left to the operator)"
"""Stands for a reason the text form does not delimit; never gantry's own."""

FIRST_SCONTROL_JSON = (23, 2)
"""The first Slurm whose scontrol prints --json (22.05 has sinfo --json only)."""

_FREE_TEXT_KEYS = (" Comment=", " Extra=", " Reason=")
_STATE_CHARS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZ_+*~#$@!%^")


def _reason_value(text: str | None) -> str | None:
    return None if text is None or text == "" else text


def _text_reason(tail: str) -> str | None:
    """The reason in a record's free-text tail (all of it after State=): None when no
    ``Reason=`` appears at all; UNREADABLE_REASON when it does and the tail also holds a
    Comment=/Extra= (whose text may contain anything), a second ``Reason=``, or no
    `` [<user>@<time>]`` end on the line (a line break inside the reason cut it). Slurm
    prints the reason last, as ``Reason=<text> [<user>@<time>]``."""
    starts = [tail.find(key) for key in _FREE_TEXT_KEYS]
    at = starts[2]
    if at < 0:
        return None
    if starts[0] >= 0 or starts[1] >= 0:
        return UNREADABLE_REASON
    value = tail[at + len(" Reason="):]
    if " Reason=" in value:
        return UNREADABLE_REASON
    cut = value.rfind(" [")
    if value.endswith("]") and cut >= 0 and "@" in value[cut:]:
        return _reason_value(value[:cut])
    return None if value in ("(null)", "None") else UNREADABLE_REASON


def _text_record(line: str) -> NodeState | None:
    if not line.startswith("NodeName="):
        return None
    end = line.find(" ")
    name = line[len("NodeName="):] if end < 0 else line[len("NodeName="):end]
    if not name:
        return None
    state_at = line.find(" State=")
    if state_at < 0:
        return NodeState(name, "UNKNOWN", _text_reason(line))
    state_end = line.find(" ", state_at + 1)
    state = line[state_at + len(" State="):] if state_end < 0 else line[
        state_at + len(" State="):state_end]
    if not state or not set(state) <= _STATE_CHARS:
        state = "UNKNOWN"
    return NodeState(name, state, _text_reason(line[state_at:]))


def parse_show_node(text: str) -> dict[str, NodeState]:
    """``scontrol show node -o`` (one line per node) -> name -> NodeState, by known keys only
    (see the module docstring); linear in the text. A name seen twice gets an unreadable
    reason."""
    nodes: dict[str, NodeState] = {}
    seen_twice: set[str] = set()
    for line in text.splitlines():
        record = _text_record(line)
        if record is None:
            continue
        if record.name in nodes:
            seen_twice.add(record.name)
        nodes[record.name] = record
    for name in seen_twice:
        nodes[name] = NodeState(name, nodes[name].state, UNREADABLE_REASON)
    return nodes


def parse_nodes_json(text: str, what: str = "node list") -> dict[str, NodeState]:
    """Slurm's node JSON (``sinfo --json`` 22.05 or ``scontrol --json show nodes``, named by
    ``what``) -> name -> NodeState; SlurmParseError when it is not such a document."""
    nodes: dict[str, NodeState] = {}
    seen_twice: set[str] = set()
    for info in parse_nodes(text, what):
        if not info.name:
            continue
        state = "+".join((info.state, *info.flags))
        if info.name in nodes:
            seen_twice.add(info.name)
        nodes[info.name] = NodeState(info.name, state, _reason_value(info.reason))
    for name in seen_twice:
        nodes[name] = NodeState(name, nodes[name].state, UNREADABLE_REASON)
    return nodes


def job_node_lists_json(text: str, job_id: str) -> tuple[str, str] | None:
    """(required, excluded) node lists of ``job_id`` in a job JSON document; None when the
    document is not one or does not list the job."""
    try:
        jobs = json.loads(text).get("jobs") if text else None
    except (ValueError, AttributeError):
        return None
    for job in jobs if isinstance(jobs, list) else []:
        if isinstance(job, dict) and str(number(job.get("job_id"))) == job_id:
            return (_text(job.get("required_nodes")), _text(job.get("excluded_nodes")))
    return None


def job_nodes_json(text: str, job_id: str) -> str | None:
    """The nodes ``job_id`` holds now (its ``nodes`` hostlist) in a job JSON document; None
    when the document does not list the job."""
    try:
        jobs = json.loads(text).get("jobs") if text else None
    except (ValueError, AttributeError):
        return None
    for job in jobs if isinstance(jobs, list) else []:
        if isinstance(job, dict) and str(number(job.get("job_id"))) == job_id:
            return _text(job.get("nodes"))
    return None


def job_node_lists_text(text: str) -> tuple[str, str]:
    """(ReqNodeList, ExcNodeList) of ``scontrol show job -o``, read after AllocNode:Sid=."""
    line = text.partition("\n")[0]
    after = line.find(" AllocNode:Sid=")
    rest = line[after:] if after >= 0 else ""
    values = []
    for key in (" ReqNodeList=", " ExcNodeList="):
        at = rest.find(key)
        value = "" if at < 0 else rest[at + len(key):].split(" ", 1)[0]
        values.append(value)
    return values[0], values[1]


def _text(value: object) -> str:
    return value if isinstance(value, str) and value != "(null)" else ""


def _expand(value: str, key: str) -> list[str]:
    return [] if value in ("", "(null)") else hostlists.expand(value, key)


def may_drain(current: NodeState | None) -> bool:
    """True when gantry may set its reason on the node as Slurm holds it now: gantry's own
    reason, or no reason on a node nobody drained."""
    if current is None:
        return False
    if current.reason is None:
        return not current.drained
    return is_gantry_reason(current.reason)


def may_resume(current: NodeState | None) -> bool:
    """True when gantry may lift the node's drain: drained and the reason is gantry's own."""
    return current is not None and current.drained and is_gantry_reason(current.reason)


@dataclass
class Scontrol:
    """Runs Slurm's tools with a timeout; every failure becomes a GantryError naming the
    command."""

    timeout_s: float = 30.0
    """Watchdog per call."""
    env: Mapping[str, str] | None = None
    """Environment (None: inherit)."""
    _version: tuple[int, int, int] | None = field(default=None, init=False, repr=False)

    def _tool(self, tool: str) -> str | None:
        """Where ``tool`` is, by the one tool rule; None when not found."""
        return tool_path(tool, self.env)

    def _run(self, args: Sequence[str], check: bool = True, tool: str = "scontrol") -> ToolOutput:
        exe = self._tool(tool)
        if exe is None:
            raise GantryError(f"{tool} not found on PATH ({how_to_point_at(tool)})")
        out = run_slurm([exe, *args], self.timeout_s, self.env)
        if check and not out.ok:
            raise GantryError(f"{tool} {' '.join(args)}: {out.describe_failure()}")
        return out

    def version(self) -> tuple[int, int, int]:
        """Slurm's version as scontrol reports it (read once)."""
        if self._version is None:
            try:
                self._version = parse_version(self._run(["--version"]).stdout, "scontrol --version")
            except GantryError:
                self._version = (0, 0, 0)  # unknown: the 22.05 path, then the text form
        return self._version

    def nodes(self) -> dict[str, NodeState]:
        """Every node: from Slurm's JSON, else from the known keys of the text form."""
        if self.version()[:2] >= FIRST_SCONTROL_JSON:
            args, tool = ["--json", "show", "nodes"], "scontrol"
        else:
            args, tool = ["--json"], "sinfo"
        shown = self._run(args, check=False, tool=tool) if self._tool(tool) else None
        if shown is not None and shown.ok:
            try:
                return parse_nodes_json(shown.stdout, f"{tool} {' '.join(args)}")
            except SlurmParseError:
                pass
        return parse_show_node(self._run(["show", "node", "-o"]).stdout)

    def node(self, name: str) -> NodeState | None:
        """One node as Slurm holds it now (a fresh read), None when Slurm does not list it."""
        return self.nodes().get(name)

    def drain(self, node: str, reason: str) -> bool:
        """Drain ``node`` with gantry's ``reason`` when a fresh read shows no reason or
        gantry's own; False (and nothing changed) otherwise."""
        if not is_gantry_reason(reason):
            raise GantryError(f"not a gantry drain reason: {reason!r:.80}")
        if not may_drain(self.node(node)):
            return False
        self._run(["update", f"NodeName={node}", "State=DRAIN", f"Reason={reason}"])
        return True

    def resume(self, node: str) -> bool:
        """Lift ``node``'s drain when a fresh read shows it drained with gantry's own
        reason; False (and nothing changed) otherwise."""
        if not may_resume(self.node(node)):
            return False
        self._run(["update", f"NodeName={node}", "State=RESUME"])
        return True

    def job_node_lists(self, job_id: str) -> tuple[list[str], list[str]]:
        """(ReqNodeList, ExcNodeList) of a job, expanded; empty when unset. From Slurm's job
        JSON; the text form only where that fails, read after ``AllocNode:Sid=`` (the job
        name before it is the user's free text)."""
        lists = job_node_lists_json(self._job_json(job_id), job_id)
        if lists is None:
            lists = job_node_lists_text(self._run(["show", "job", "-o", job_id]).stdout)
        return (_expand(lists[0], "ReqNodeList"), _expand(lists[1], "ExcNodeList"))

    def job_nodes(self, job_id: str) -> list[str] | None:
        """The nodes the job holds now (with --no-kill, Slurm removes a failed node); None
        when Slurm's job JSON cannot say."""
        held = job_nodes_json(self._job_json(job_id), job_id)
        return None if held is None else _expand(held, "nodes")

    def _job_json(self, job_id: str) -> str:
        if self.version()[:2] >= FIRST_SCONTROL_JSON:
            shown = self._run(["--json", "show", "job", job_id], check=False)
        elif self._tool("squeue"):
            shown = self._run(["--json"], check=False, tool="squeue")  # 22.05 ignores --jobs
        else:
            return ""
        return shown.stdout if shown.ok else ""

    def requeue_excluding(self, job_id: str, exclude: str,
                          also: Sequence[str] = ()) -> list[str]:
        """Requeue ``job_id`` so it cannot land on ``exclude`` again; returns the steps taken.
        ``also``: more ``Field=value`` updates for the requeued job (e.g. ``Switches=0``).

        A running job's ExcNodeList cannot be changed, so: requeuehold (the job leaves the
        nodes and waits, held), set ExcNodeList, release. Runs under SIGTERM protection by
        the caller: requeuing our own job signals this very process.
        """
        steps = []
        if exclude and not also:
            direct = self._run(["update", f"JobId={job_id}", f"ExcNodeList={exclude}"], check=False)
            if direct.ok:
                self._run(["requeue", job_id])
                return [f"ExcNodeList={exclude}", "requeue"]
        self._run(["requeuehold", job_id])
        steps.append("requeuehold")
        try:  # the job is held now: whatever fails below, it is released
            changes = [f"ExcNodeList={exclude}"] if exclude else []
            for change in [*changes, *also]:
                done = self._run(["update", f"JobId={job_id}", change], check=False)
                steps.append(change if done.ok else f"{change} (failed)")
        finally:
            self._run(["release", job_id])
            steps.append("release")
        return steps
