"""After a failed training step: pin it on its nodes, drain them, swap in spares or requeue.

``gantry recover`` (the batch script runs it when a step fails recoverably) reads what the
step left (launcher/recovery/evidence.py), counts a fault on each culprit in the job dir
(launcher/recovery/node_faults.py), drains it with ``gantry:run:<what>`` when this process
writes the preflight state dir (the gate's rule: else the node's own health checks do), and
then, unless told not to relaunch:

- every launch node still healthy keeps its place; each failed node's place goes to the
  nearest healthy spare of the allocation (launcher/recovery/spares.py) that passes the
  preflight level on its own (only the replacements are checked);
- no culprit found: the step is relaunched on the same nodes;
- the same rank failing the same way on the spare that took its place (a fault of the
  program, not of a node): no node is drained and the job stops;
- too few spares: the job is requeued excluding every node that failed in this job (the
  submit-time domain fence dropped, so the requeue may run anywhere healthy), or it stops
  when requeue is off.

Every recovery is one line of ``<job dir>/recoveries.jsonl``.
"""

from __future__ import annotations

import json
import os
import signal
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from launcher.errors import GantryError
from launcher.job_dir import PLACEMENT_FILE
from launcher.preflight.drain_reason import DRAIN_PREFIX, is_gantry_reason
from launcher.preflight.gate_plan import NodePlan, read_node_plan
from launcher.preflight.slurm_nodes import Scontrol
from launcher.preflight.state import load_history, policy_lock, save_history, state_dir
from launcher.preflight.state_access import state_access
from launcher.recovery.evidence import Finding, find_culprits
from launcher.recovery.node_faults import add_faults, read_faults, read_recoveries
from launcher.recovery.spares import candidates, nearest_first
from launcher.site_config import LoadedSite
from topology import hostlists
from topology.model import Topology

HealthCheck = Callable[[list[str]], list[str]]
"""Runs the preflight on these nodes; returns the ones that passed."""


@dataclass(frozen=True)
class RecoveryOutcome:
    """What ``recover`` found and did."""

    decision: str
    """``relaunch`` (on ``nodes``), ``requeue`` (done) or ``stop``."""
    nodes: list[str]
    """The next launch's nodes, in allocation order (relaunch only)."""
    finding: Finding
    replaced: list[tuple[str, str]] = field(default_factory=list)
    """(failed node, spare taking its place)."""
    drained: list[str] = field(default_factory=list)
    rejected: list[str] = field(default_factory=list)
    """Spares that failed their preflight."""
    notes: list[str] = field(default_factory=list)
    requeue_steps: list[str] = field(default_factory=list)
    message: str = ""

    def record(self, attempt: str, step_rc: int, seconds: float, level: str) -> dict[str, Any]:
        """The recoveries.jsonl line; ``level``: the preflight the spares had to pass."""
        return {"time": time.time(), "attempt": attempt, "step_rc": step_rc,
                "spare_preflight": level,
                "decision": self.decision, "culprits": self.finding.culprits,
                "evidence": self.finding.evidence, "fault_time": self.finding.fault_time,
                "replaced": dict(self.replaced),
                "drained": self.drained, "rejected_spares": self.rejected,
                "nodes": self.nodes, "notes": self.notes, "requeue_steps": self.requeue_steps,
                "recover_s": round(seconds, 3), "message": self.message}


def drain_culprits(site: LoadedSite, culprits: dict[str, str], scontrol: Scontrol,
                   now: float) -> tuple[list[str], list[str]]:
    """Drain each culprit ``gantry:run:<what>`` when this process writes the state dir;
    returns (drained, notes). An operator's reason is never touched (Scontrol re-reads)."""
    root = state_dir(site)
    access = state_access(root)
    if not access.write:
        return [], [f"culprits not drained ({access.problem}): left to the nodes' own "
                    "Prolog/Epilog/HealthCheckProgram; this job excludes them"]
    drained, notes = [], []
    with policy_lock(root):
        for node, what in culprits.items():
            reason = f"{DRAIN_PREFIX}run:{what}"
            if not is_gantry_reason(reason):
                reason = f"{DRAIN_PREFIX}run:failed"
            try:
                done = scontrol.drain(node, reason)
            except GantryError as err:
                notes.append(f"{node}: drain failed: {err}")
                continue
            if not done:
                notes.append(f"{node}: not drained: its Slurm reason is not gantry's own")
                continue
            drained.append(node)
            history = load_history(root, node)
            save_history(root, replace(history, drained_by_gantry=True, drain_reason=reason,
                                       drained_at=now, clean_passes=0, last_status="FAIL",
                                       last_run=now))
    return drained, notes


def _sbatch_options(job_dir: Path) -> list[str]:
    try:
        data = json.loads((job_dir / PLACEMENT_FILE).read_text(encoding="utf-8"))
        options = data.get("sbatch_options") or []
    except (OSError, ValueError, AttributeError):
        return []
    return [o for o in options if isinstance(o, str)] if isinstance(options, list) else []


def fence_nodes(job_dir: Path) -> set[str]:
    """The nodes the submit-time placement excluded (its domain fence and the unhealthy
    nodes of then), which a requeue after a fault drops: they may be what is left."""
    fenced: set[str] = set()
    for option in _sbatch_options(job_dir):
        if option.startswith("--exclude="):
            try:
                fenced |= set(hostlists.expand(option.removeprefix("--exclude="), "--exclude"))
            except GantryError:
                continue
    return fenced


def fence_updates(job_dir: Path) -> list[str]:
    """Job updates that lift the rest of the fence on a requeue after a fault: the
    placement's ``--switches`` wait (Slurm would hold the job for it)."""
    if any(o.startswith("--switches=") for o in _sbatch_options(job_dir)):
        return ["Switches=0"]
    return []


def _requeue(job_dir: Path, job_id: str, faulty: Sequence[str], scontrol: Scontrol) -> \
        list[str]:
    _required, already = scontrol.job_node_lists(job_id)
    exclude = sorted((set(already) - fence_nodes(job_dir)) | set(faulty))
    previous = signal.signal(signal.SIGTERM, signal.SIG_IGN)  # requeuing signals us too
    try:
        return scontrol.requeue_excluding(job_id, hostlists.collect(exclude) if exclude
                                          else "", fence_updates(job_dir))
    finally:
        signal.signal(signal.SIGTERM, previous)


def recover(site: LoadedSite, job_dir: Path, attempt_dir: Path, launch_nodes: list[str],
            job_id: str | None, check: HealthCheck, *, relaunch: bool = True,
            requeue: bool = True, scontrol: Scontrol | None = None,
            topology: Topology | None = None, plan: NodePlan | None = None) -> \
        RecoveryOutcome:
    """See the module docstring."""
    scontrol = scontrol or Scontrol()
    now = time.time()
    allocation = scontrol.job_nodes(job_id) if job_id else None
    if not allocation:
        env = os.environ.get("SLURM_JOB_NODELIST", "")
        allocation = hostlists.expand(env, "SLURM_JOB_NODELIST") if env else list(launch_nodes)
    states = scontrol.nodes()
    finding = find_culprits(attempt_dir, launch_nodes, allocation, states, now)
    drained: list[str] = []
    notes: list[str] = []
    repeated = program_fault(read_recoveries(job_dir), finding)
    if repeated:
        return RecoveryOutcome(
            "stop", [], finding, message=f"{repeated} failed the same way again on a fresh "
            "node: a fault of the program, not of a node (no node drained, no relaunch)")
    if finding.culprits:
        add_faults(job_dir, finding.culprits, now)
        drained, notes = drain_culprits(site, finding.culprits, scontrol, now)
    faulty = set(read_faults(job_dir))
    held = set(allocation)
    keep = [n for n in launch_nodes if n not in faulty and n in held]
    lost = [n for n in launch_nodes if n not in keep]

    def give_up(why: str) -> RecoveryOutcome:
        if requeue and job_id:
            steps = _requeue(job_dir, job_id, sorted(faulty), scontrol)
            return RecoveryOutcome("requeue", [], finding, [], drained, [], notes, steps,
                                   f"{why}; requeued excluding "
                                   f"{hostlists.collect(sorted(faulty)) or 'no node'}")
        return RecoveryOutcome("stop", [], finding, [], drained, [], notes, [],
                               f"{why}; not requeued (requeue off or restarts used up)")

    if not relaunch:
        return give_up("in-allocation recoveries used up (policy.max_recoveries)")
    if not lost:
        return RecoveryOutcome("relaunch", list(launch_nodes), finding, [], drained, [],
                               notes, [], "no node to blame: relaunching on the same nodes")
    pool = nearest_first(candidates(allocation, launch_nodes, sorted(faulty), states), lost,
                         topology, plan.spare_nodes if plan else ())
    chosen: list[str] = []
    rejected: list[str] = []
    while len(chosen) < len(lost) and pool:
        batch, pool = pool[: len(lost) - len(chosen)], pool[len(lost) - len(chosen):]
        passed = check(batch)
        chosen += [n for n in batch if n in passed]
        rejected += [n for n in batch if n not in passed]
    if len(chosen) < len(lost):
        outcome = give_up(f"{len(lost)} node(s) to replace, {len(chosen)} healthy spare(s)")
        return RecoveryOutcome(outcome.decision, [], finding, [], drained, rejected, notes,
                               outcome.requeue_steps, outcome.message)
    position = {n: i for i, n in enumerate(allocation)}
    nodes = sorted([*keep, *chosen], key=lambda n: position.get(n, len(position)))
    replaced = list(zip(lost, chosen, strict=True))
    swaps = ", ".join(f"{new} takes {old}'s place" for old, new in replaced)
    return RecoveryOutcome("relaunch", nodes, finding, replaced, drained, rejected, notes, [],
                           f"relaunching on {hostlists.collect(nodes)}: {swaps}")


_NODE_WORDS = ("unresponsive", "hung", "vanished")


def program_fault(history: Sequence[dict[str, Any]], finding: Finding) -> str | None:
    """``rankR`` when this failure is the one the last recovery blamed on another node: the
    same rank exiting with the same status (or killed the same way) on the spare that took
    its place. A program's own fault (a bug, running out of memory) follows its rank from
    node to node; draining each node it lands on would take healthy nodes from the site."""
    if not history or len(finding.culprits) != 1:
        return None
    last = history[-1].get("culprits")
    what = next(iter(finding.culprits.values()))
    rank = what.partition("-")[0]
    if (not isinstance(last, dict) or what not in last.values() or not rank.startswith("rank")
            or what.endswith(_NODE_WORDS)):
        return None
    return rank if next(iter(finding.culprits)) not in last else None


def plan_of(job_dir: Path) -> NodePlan | None:
    """The job's planned nodes (placement.json), None when Slurm chose them."""
    path = job_dir / PLACEMENT_FILE
    if not path.is_file():
        return None
    try:
        return read_node_plan(path)
    except GantryError:
        return None
