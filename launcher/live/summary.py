"""What a followed job did, accumulated from the watcher's events, and the end-of-job summary:
loss first vs last, nodes used, nodes excluded or drained and why, recoveries, stragglers
found, time per phase."""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from launcher.live.preflight_rows import PreflightRow, preflight_rows
from launcher.live.watcher import Event, LogLines, PreflightDone, Recovered, StepDone, Straggler
from launcher.placement_record import PlacementRecord
from launcher.report.log_markers import attempt_marks
from launcher.report.run_data import StepRecord
from launcher.slurm import JobInfo, NodeInfo


@dataclass
class FollowState:
    """Everything seen so far."""

    log_lines: list[str] = field(default_factory=list)
    """The job's output, line by line."""
    preflight: list[PreflightDone] = field(default_factory=list)
    """Gate outcomes, one per attempt that got that far."""
    records: dict[int, StepRecord] = field(default_factory=dict)
    """Metrics by step (a restart's re-run of a step replaces the first)."""
    recoveries: list[str] = field(default_factory=list)
    """One line per recovery of a failed step (launcher/recovery/node_faults.py)."""
    stragglers: list[str] = field(default_factory=list)
    """One line per rank found slow (launcher/train/straggler_log.py)."""

    def apply(self, event: Event) -> None:
        if isinstance(event, LogLines):
            self.log_lines += event.lines
        elif isinstance(event, PreflightDone):
            self.preflight.append(event)
        elif isinstance(event, StepDone):
            self.records[event.record.step] = event.record
        elif isinstance(event, Recovered):
            self.recoveries.append(event.line)
        elif isinstance(event, Straggler) and event.flagged:
            self.stragglers.append(event.line)

    def steps(self) -> list[StepRecord]:
        return [self.records[s] for s in sorted(self.records)]


@dataclass(frozen=True)
class Excluded:
    """A node the gate kept out of the job."""

    node: str
    """Node name."""
    status: str
    """FAIL or MISSING."""
    finding: str
    """What failed, observed vs expected."""
    outcome: str
    """excluded / excluded, drained: <reason>."""


@dataclass(frozen=True)
class RunSummary:
    """The end-of-job summary."""

    job_id: str
    """Slurm job id."""
    state: str
    """Final Slurm state."""
    exit_code: int | None
    """Batch script exit code."""
    restarts: int
    """Attempts after the first."""
    steps: int
    """Steps with metrics."""
    first_loss: float | None
    """Loss of the first step seen."""
    last_loss: float | None
    """Loss of the last step."""
    median_tokens_per_s: float | None
    """Median throughput."""
    nodes_used: tuple[str, ...]
    """Nodes the (last) training step ran on."""
    spares_used: tuple[str, ...]
    """Planned spares among them."""
    excluded: tuple[Excluded, ...]
    """Nodes kept out by the gate (any attempt)."""
    phases: dict[str, float]
    """Seconds: queued, preflight, gate, training, total (those known)."""
    recoveries: tuple[str, ...] = ()
    """One line per recovery of a failed step inside the allocation or by requeue."""
    stragglers: tuple[str, ...] = ()
    """One line per rank found slow."""

    @property
    def loss_went_down(self) -> bool:
        return (self.first_loss is not None and self.last_loss is not None
                and self.steps > 1 and self.last_loss < self.first_loss)

    def to_json(self) -> dict[str, Any]:
        return {
            "job_id": self.job_id, "state": self.state, "exit_code": self.exit_code,
            "restarts": self.restarts, "steps": self.steps, "first_loss": self.first_loss,
            "last_loss": self.last_loss, "loss_went_down": self.loss_went_down,
            "median_tokens_per_s": self.median_tokens_per_s,
            "nodes_used": list(self.nodes_used), "spares_used": list(self.spares_used),
            "excluded": [{"node": e.node, "status": e.status, "finding": e.finding,
                          "outcome": e.outcome} for e in self.excluded],
            "phases_s": {k: round(v, 1) for k, v in self.phases.items()},
            "stragglers": list(self.stragglers),
        }


def rows_for(done: PreflightDone, placement: PlacementRecord,
             node_states: Mapping[str, NodeInfo]) -> list[PreflightRow]:
    culprits = done.fabric.get("culprits", {}) if done.fabric else {}
    return preflight_rows(done.verdicts, placement, done.chosen, done.launch, node_states,
                          {str(k): str(v) for k, v in culprits.items()})


def _phases(lines: Sequence[str], submitted_at: float | None) -> dict[str, float]:
    marks = attempt_marks(list(lines))
    phases: dict[str, float] = {}
    if marks and submitted_at is not None and "start" in marks[0].times:
        phases["queued"] = max(0.0, marks[0].times["start"] - submitted_at)
    for attempt in marks:
        for name, seconds in attempt.phase_seconds().items():
            phases[name] = phases.get(name, 0.0) + seconds
    ends = [a.times["end"] for a in marks if "end" in a.times]
    if ends and submitted_at is not None:
        phases["total"] = max(0.0, max(ends) - submitted_at)
    return phases


def summarize(state: FollowState, job_id: str, info: JobInfo | None,
              placement: PlacementRecord, node_states: Mapping[str, NodeInfo],
              submitted_at: float | None) -> RunSummary:
    steps = state.steps()
    excluded: dict[str, Excluded] = {}
    used: tuple[str, ...] = ()
    for done in state.preflight:
        for row in rows_for(done, placement, node_states):
            if row.outcome.startswith("excluded"):
                excluded[row.node] = Excluded(row.node, row.status, row.finding, row.outcome)
        if done.launch:
            used = done.launch
    spares = tuple(n for n in used if (r := placement.role_of(n)) is not None and r.spare)
    return RunSummary(
        job_id=job_id, state=info.state if info else "UNKNOWN",
        exit_code=info.exit_code if info else None,
        restarts=info.restarts if info else max(0, len(state.preflight) - 1),
        steps=len(steps), first_loss=steps[0].loss if steps else None,
        last_loss=steps[-1].loss if steps else None,
        median_tokens_per_s=statistics.median(r.tokens_per_s for r in steps) if steps else None,
        nodes_used=used, spares_used=spares, excluded=tuple(excluded.values()),
        phases=_phases(state.log_lines, submitted_at), recoveries=tuple(state.recoveries),
        stragglers=tuple(state.stragglers))


def summary_lines(summary: RunSummary) -> list[str]:
    """The summary as plain lines (the rich view prints the same lines in a panel)."""
    lines = [f"job {summary.job_id} {summary.state}"
             + (f" (exit {summary.exit_code})" if summary.exit_code is not None else "")
             + (f", {summary.restarts} restart(s)" if summary.restarts else "")]
    if summary.first_loss is not None and summary.last_loss is not None:
        change = summary.last_loss - summary.first_loss
        verdict = "went down" if summary.loss_went_down else "did NOT go down"
        lines.append(f"loss {verdict}: {summary.first_loss:.4f} → {summary.last_loss:.4f} "
                     f"({change:+.4f}) over {summary.steps} steps, median "
                     f"{summary.median_tokens_per_s or 0:,.0f} tokens/s")
    else:
        lines.append("no training steps recorded")
    if summary.nodes_used:
        spare = f" (spare {', '.join(summary.spares_used)} stepped in)" \
            if summary.spares_used else ""
        lines.append(f"nodes used: {', '.join(summary.nodes_used)}{spare}")
    for item in summary.excluded:
        lines.append(f"{item.node} {item.outcome} — {item.status}: {item.finding}")
    lines += [f"recovery {line}" for line in summary.recoveries]
    lines += [f"straggler {line}" for line in summary.stragglers]
    if summary.phases:
        order = ("queued", "preflight", "gate", "training", "total")
        lines.append("time: " + " · ".join(f"{k} {summary.phases[k]:.0f} s" for k in order
                                           if k in summary.phases))
    return lines
