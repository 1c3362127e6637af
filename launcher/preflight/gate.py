"""The launch gate inside a job: preflight on every allocated node at once, then decide.

1. ``srun --ntasks-per-node=1 --label python -m launcher preflight --json`` on all nodes.
2. Each node's verdict is read back (label -> lines -> JSON, validated); a node without a
   valid verdict counts as failed (``gantry:preflight:no-verdict``).
3. The drain policy runs for every node (owned reasons, operator reasons untouched,
   resume after K clean passes, rate limit) when the gate is the state dir's writer; a gate
   that only reads it (a job on a site whose state dir root's Slurm scripts write) excludes
   failed nodes without draining them (gate_actions).
4. Decision: ``go`` with ``need`` healthy nodes when enough are left, else ``requeue`` the job
   with the bad nodes excluded (or ``abort`` without a job). With the job's plan (its
   placement.json) the planned rank nodes that passed are kept and the places of the others
   are filled from healthy spares (see gate_plan.py); without one, the first ``need`` healthy
   nodes in allocation order run.
5. The fabric test (when the batch script ran it over the nodes that passed: ``fabric``, its
   output): judged by launcher/preflight/fabric_judge.py; a node it names (a slow node, or
   both ends of a slow link) fails like a node check (``gantry:fabric.node:...`` /
   ``gantry:fabric.link:...``): drained by the same policy, excluded, a spare in its place.
   A test without a usable record names nobody (ERROR, in the record and the log line).
A node whose only problem is a setup error (ERROR: a check could not run because gantry's own
install lacks a piece, e.g. torch) is gantry's fault, not the node's: it is neither drained
nor counted as a clean pass, it stays eligible, and the decision line names what to install.
"""

from __future__ import annotations

import os
import re
import signal
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal

import launcher
from launcher.errors import UserInputError
from launcher.install_paths import prepend_pythonpath
from launcher.preflight.drain_policy import Action
from launcher.preflight.drain_reason import DRAIN_PREFIX
from launcher.preflight.fabric_judge import FabricVerdict, error_verdict, judge
from launcher.preflight.fabric_result import result_from_json
from launcher.preflight.gate_plan import NodePlan, choose_nodes
from launcher.preflight.policy_apply import apply_policy
from launcher.preflight.slurm_nodes import Scontrol
from launcher.preflight.state import state_dir
from launcher.preflight.state_access import StateAccess, state_access
from launcher.preflight.verdict import NodeVerdict, verdict_from_json
from launcher.site_config import LoadedSite
from launcher.slurm.runner import run_slurm
from launcher.slurm.tools import how_to_point_at, tool_path
from topology import hostlists
from topology.whole_numbers import MAX_DIGITS, read_whole

GATE_SCHEMA = "gantry.preflight.gate"
GATE_VERSION = 1
NO_VERDICT = f"{DRAIN_PREFIX}preflight:no-verdict"


@dataclass(frozen=True)
class NodeOutcome:
    """One node's result as the gate sees it."""

    node: str
    """Node name."""
    status: str
    """PASS, WARN, FAIL, ERROR (a setup error of gantry's install) or MISSING (no valid
    verdict)."""
    reason: str | None
    """Drain reason when it failed, else None."""
    failing: list[str] = field(default_factory=list)
    """Ids of failing checks (or why the verdict is missing)."""
    setup_errors: dict[str, str] = field(default_factory=dict)
    """Check id -> what to install, for the checks that could not run (never drained)."""


@dataclass(frozen=True)
class GateDecision:
    """What the job does next."""

    decision: Literal["go", "requeue", "abort"]
    """go on with ``nodes``; requeue excluding ``excluded``; abort (no job to requeue)."""
    nodes: list[str]
    """Nodes to run on (go), in allocation order."""
    excluded: list[str]
    """Nodes that failed or gave no verdict."""
    need: int
    """Nodes the job needs."""
    message: str
    """One line for the log."""
    planned: list[str] = field(default_factory=list)
    """The plan's rank nodes in rank order (empty without a plan)."""
    replaced: list[tuple[str, str]] = field(default_factory=list)
    """(planned node that does not run, node that takes its place) on go with a plan."""


def srun_argv(nodes: Sequence[str], site_path: Path, level: str) -> list[str]:
    """The srun command that runs one preflight task per node."""
    srun = tool_path("srun")
    if srun is None:
        raise UserInputError(f"srun not found on PATH ({how_to_point_at('srun')})")
    compact = hostlists.collect(list(nodes)) if nodes else ""
    return [
        srun,
        f"--nodes={len(nodes)}",
        f"--ntasks={len(nodes)}",
        "--ntasks-per-node=1",
        f"--nodelist={compact}",
        "--label",
        "--kill-on-bad-exit=0",
        "--job-name=gantry-preflight",
        sys.executable,
        "-m",
        "launcher",
        "preflight",
        "--json",
        "--site",
        str(site_path),
        "--level",
        level,
    ]


_LABELLED = re.compile(rf"^\s*[0-9]{{1,{MAX_DIGITS}}}: ", re.M)
"""A line as ``srun --label`` prints it: the task id in ASCII digits, then ": "."""


def split_labelled(text: str) -> dict[int, str]:
    """``srun --label`` output -> task id -> that task's text, pieces re-joined in order.

    srun forwards long lines in chunks and labels every chunk, so a one-line JSON verdict
    arrives as several ``N: `` pieces: they are concatenated without separators (JSON
    needs no newlines between tokens, and the verdict is printed on one line).
    """
    tasks: dict[int, list[str]] = {}
    for line in text.splitlines():
        head, sep, rest = line.partition(": ")
        task = read_whole(head.strip()) if sep else None  # "²: " is no label (int() refuses)
        if task is not None:
            tasks.setdefault(task, []).append(rest)
    return {task: "".join(pieces) for task, pieces in tasks.items()}


def _pieces(text: str) -> dict[int, str]:
    """Per-task texts: ``srun --label`` output, else one JSON verdict per line."""
    if _LABELLED.search(text):
        return split_labelled(text)
    lines = [line for line in text.splitlines() if line.strip()]
    return dict(enumerate(lines))


def read_verdicts(text: str, nodes: Sequence[str]) -> tuple[dict[str, NodeVerdict], dict[str, str]]:
    """Verdicts by node from srun output (labelled, or one JSON line per node); problems (bad
    JSON, unknown node) by task."""
    verdicts: dict[str, NodeVerdict] = {}
    problems: dict[str, str] = {}
    for task, body in sorted(_pieces(text).items()):
        start = body.find("{")
        if start < 0:
            problems[f"task{task}"] = "no JSON verdict in output"
            continue
        try:
            verdict = verdict_from_json(body[start:], f"task {task}")
        except UserInputError as err:
            problems[f"task{task}"] = str(err)
            continue
        if verdict.node not in nodes:
            problems[f"task{task}"] = f"verdict for {verdict.node!r}, not an allocated node"
            continue
        verdicts[verdict.node] = verdict
    return verdicts, problems


def outcomes_for(nodes: Sequence[str], verdicts: Mapping[str, NodeVerdict]) -> list[NodeOutcome]:
    out = []
    for node in nodes:
        v = verdicts.get(node)
        if v is None:
            out.append(NodeOutcome(node, "MISSING", NO_VERDICT, ["no verdict"]))
        else:
            out.append(NodeOutcome(node, v.status, v.drain_reason(), [c.id for c in v.failures()],
                                   {c.id: c.action for c in v.setup_errors()}))
    return out


def passed_nodes(nodes: Sequence[str], text: str) -> list[str]:
    """The nodes whose verdict in ``text`` (the preflight step's output) lets them run: the
    fabric test's nodes, in allocation order. Nothing is drained or decided."""
    verdicts, _ = read_verdicts(text, nodes)
    return [o.node for o in outcomes_for(nodes, verdicts) if o.reason is None]


def fabric_verdict(site: LoadedSite, text: str, source: str) -> FabricVerdict:
    """The fabric test's output judged under the site's preflight.fabric settings."""
    try:
        result = result_from_json(text, source)
    except UserInputError as err:
        return error_verdict(str(err))
    return judge(result, site.config.preflight.fabric)


def with_fabric(outcomes: Sequence[NodeOutcome], verdict: FabricVerdict) -> list[NodeOutcome]:
    """The node outcomes with the nodes the fabric verdict names failed (check id
    ``fabric.node`` or ``fabric.link``, the reason the verdict gives)."""
    out = []
    for o in outcomes:
        reason = verdict.culprits.get(o.node)
        if reason is not None and o.reason is None:
            check = reason.removeprefix(DRAIN_PREFIX).split(":")[0]
            o = NodeOutcome(o.node, "FAIL", reason, [check], o.setup_errors)
        out.append(o)
    return out


def setup_note(outcomes: Sequence[NodeOutcome]) -> str:
    """``setup error on n[1-2]: gpu.gemm, gpu.membw could not run (install ...); gantry's
    install, not the nodes: not drained``, or "" when no node had one."""
    hit = [o for o in outcomes if o.setup_errors]
    if not hit:
        return ""
    ids = sorted({cid for o in hit for cid in o.setup_errors})
    first = next(iter(hit[0].setup_errors.values()))
    return (f"setup error on {hostlists.collect([o.node for o in hit])}: {', '.join(ids)} "
            f"could not run ({first}); gantry's install, not the nodes: not drained")


def decide(
    nodes: Sequence[str],
    outcomes: Sequence[NodeOutcome],
    need: int,
    job_id: str | None,
    plan: NodePlan | None = None,
) -> GateDecision:
    """go with enough healthy nodes (the plan's where it has them), else requeue excluding the
    bad ones (abort without a job); the message ends with the nodes' setup errors, if any."""
    decision = _decide(nodes, outcomes, need, job_id, plan)
    note = setup_note(outcomes)
    return replace(decision, message=f"{decision.message}; {note}") if note else decision


def _decide(
    nodes: Sequence[str],
    outcomes: Sequence[NodeOutcome],
    need: int,
    job_id: str | None,
    plan: NodePlan | None = None,
) -> GateDecision:
    bad = [o.node for o in outcomes if o.reason is not None]
    if outcomes and all(o.status == "MISSING" for o in outcomes):
        return GateDecision(
            "abort",
            [],
            bad,
            need,
            "abort: no node returned a verdict (the gate itself failed; nothing drained)",
        )
    healthy = [n for n in nodes if n not in bad]
    choice = choose_nodes(nodes, healthy, need, plan) if plan is not None else None
    if choice is not None and plan is not None:
        return _go_with_plan(choice.nodes, choice.replaced, bad, need, plan, len(healthy))
    if len(healthy) >= need:
        chosen = healthy[:need]
        spare = len(healthy) - need
        msg = (
            f"go: {len(chosen)} healthy nodes {hostlists.collect(chosen)}"
            + (f", excluded {hostlists.collect(bad)}" if bad else "")
            + (f", {spare} spare left unused" if spare else "")
        )
        return GateDecision("go", chosen, bad, need, msg)
    short = f"{len(healthy)} healthy of {len(nodes)}, need {need}"
    if job_id:
        return GateDecision(
            "requeue",
            [],
            bad,
            need,
            f"requeue job {job_id} excluding {hostlists.collect(bad)} ({short})",
        )
    return GateDecision("abort", [], bad, need, f"abort: {short} and no job id to requeue")


def _go_with_plan(
    chosen: list[str],
    replaced: list[tuple[str, str]],
    bad: list[str],
    need: int,
    plan: NodePlan,
    healthy: int,
) -> GateDecision:
    spare = healthy - need
    swaps = "; ".join(f"{new} takes planned {old}'s place" for old, new in replaced)
    msg = (
        f"go: {len(chosen)} healthy nodes {hostlists.collect(chosen)}"
        + (f", excluded {hostlists.collect(bad)}" if bad else "")
        + (f", {swaps}" if swaps else " (as planned)")
        + (f", {spare} spare left unused" if spare else "")
    )
    return GateDecision("go", chosen, bad, need, msg, list(plan.rank_nodes), replaced)


def gate_actions(
    site: LoadedSite, judged: Mapping[str, str | None], scontrol: Scontrol,
    access: StateAccess | None = None,
) -> list[Action]:
    """The drain policy for the judged nodes, applied when this process is the state dir's
    writer (``access``: default the site's state dir as this process may use it). Else, as
    a job reading the state dir root's Slurm scripts write, nothing is drained, resumed or
    written: a failed node is left to its Prolog/Epilog/HealthCheckProgram, which drain it
    when they see it fail (and count the drain in the rate limit); this job excludes it."""
    access = access or state_access(state_dir(site))
    if access.write:
        return apply_policy(site, judged, scontrol)
    note = (f"excluded, not drained by the gate ({access.problem}: drains are left to the "
            "node's own Prolog/Epilog/HealthCheckProgram)")
    return [Action(node, "keep", reason, note) for node, reason in judged.items()
            if reason is not None]


@dataclass(frozen=True)
class GateReport:
    """Everything the gate did, for the log and the JSON output."""

    decision: GateDecision
    """What happens next."""
    outcomes: list[NodeOutcome]
    """Per node."""
    actions: list[Action]
    """Drain policy actions."""
    problems: dict[str, str]
    """Unreadable task outputs."""
    requeue_steps: list[str]
    """scontrol steps taken for a requeue."""
    duration_s: float
    """Wall time of the whole gate."""
    preflight_s: float
    """Wall time of the srun preflight step."""
    fabric: FabricVerdict | None = None
    """The fabric test's verdict (None: the test did not run)."""

    def to_dict(self) -> dict[str, Any]:
        d = self.decision
        return {
            "schema": GATE_SCHEMA,
            "version": GATE_VERSION,
            "gantry_version": launcher.__version__,
            "decision": d.decision,
            "message": d.message,
            "need": d.need,
            "nodes": hostlists.collect(d.nodes) if d.nodes else "",
            "node_list": d.nodes,
            "excluded": d.excluded,
            "planned": d.planned,
            "replaced": {old: new for old, new in d.replaced},
            "drained": [a.node for a in self.actions if a.kind == "drain"],
            "resumed": [a.node for a in self.actions if a.kind == "resume"],
            "actions": [
                {"node": a.node, "action": a.kind, "reason": a.reason, "note": a.note}
                for a in self.actions
            ],
            "verdicts": {
                o.node: {"status": o.status, "reason": o.reason, "failing": o.failing,
                         "setup_errors": o.setup_errors}
                for o in self.outcomes
            },
            "problems": self.problems,
            "requeue_steps": self.requeue_steps,
            "duration_s": round(self.duration_s, 3),
            "preflight_s": round(self.preflight_s, 3),
            "fabric": self.fabric.to_dict() if self.fabric is not None else None,
        }


def run_gate(
    site: LoadedSite,
    nodes: Sequence[str],
    need: int,
    level: str,
    job_id: str | None,
    requeue: bool,
    timeout_s: float,
    reports: str | None = None,
    plan: NodePlan | None = None,
    fabric: FabricVerdict | None = None,
) -> GateReport:
    """Run preflight everywhere (or read ``reports``: the output of the srun preflight step
    the batch script ran itself), fail the nodes the ``fabric`` verdict names, apply the
    drain policy, decide (following ``plan``, the job's placement, when given), requeue if
    so decided."""
    start = time.monotonic()
    problems: dict[str, str] = {}
    if reports is None:
        env = dict(os.environ)
        pythonpath = prepend_pythonpath(env.get("PYTHONPATH"))
        if pythonpath:
            env["PYTHONPATH"] = pythonpath
        out = run_slurm(srun_argv(nodes, site.path, level), timeout_s, env)
        text = out.stdout
        if out.timed_out or out.returncode not in (0, 1):
            problems["srun"] = out.describe_failure()
    else:
        text = reports
    preflight_s = time.monotonic() - start
    verdicts, bad_tasks = read_verdicts(text, nodes)
    problems.update(bad_tasks)
    outcomes = outcomes_for(nodes, verdicts)
    if fabric is not None:
        outcomes = with_fabric(outcomes, fabric)
    scontrol = Scontrol()
    # A node without a verdict is excluded from this job but not drained: the missing
    # verdict may be the gate's fault (srun, shared FS), not the node's. A setup error
    # (ERROR) is gantry's install's fault: neither a drain nor a clean pass.
    judged = {o.node: o.reason for o in outcomes if o.status not in ("MISSING", "ERROR")}
    actions = gate_actions(site, judged, scontrol) if judged else []
    decision = decide(nodes, outcomes, need, job_id, plan)
    if fabric is not None:
        decision = replace(decision, message=f"{decision.message}; {fabric.message}")
    steps: list[str] = []
    if decision.decision == "requeue" and job_id:
        required, already = scontrol.job_node_lists(job_id)
        pinned = sorted(set(required) & set(decision.excluded))
        if pinned:
            decision = replace(
                decision,
                decision="abort",
                message=f"abort: the job requires {hostlists.collect(pinned)} (--nodelist), "
                "which failed preflight; a requeue could never run",
            )
        elif requeue:
            exclude = hostlists.collect(sorted(set(already) | set(decision.excluded)))
            # Requeuing our own job signals this process: finish the scontrol sequence first.
            previous = signal.signal(signal.SIGTERM, signal.SIG_IGN)
            try:
                steps = scontrol.requeue_excluding(job_id, exclude)
            finally:
                signal.signal(signal.SIGTERM, previous)
    return GateReport(decision, outcomes, actions, problems, steps,
                      time.monotonic() - start, preflight_s, fabric)
