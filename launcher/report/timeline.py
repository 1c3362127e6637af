"""Trace events -> per-rank phases (forward, backward, weight-grad, send, recv, idle) and the
measured pipeline bubble.

Phase of an event: compute ``forward`` -> forward; ``backward`` / ``backward_input`` ->
backward; ``weight`` -> weight-grad; posting a send or waiting for one -> send; posting a
receive -> recv; waiting for a receive whose data had not arrived -> idle (the executor counts
that as bubble). Time inside the step's window that no event covers is idle too.

The measured bubble of a step comes from the native timers in metrics.jsonl, not from the
trace (rank clocks in the trace are aligned only up to the start of training):
``1 - sum(compute) / (ranks * slowest rank's pipeline time)``, the same definition the
schedule simulator uses for its theoretical bubble.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from launcher.report.run_data import StepRecord, TraceEvent

PHASES = ("forward", "backward", "weight-grad", "send", "recv", "idle")
"""Every phase, in legend order."""


def phase_of(event: TraceEvent) -> str:
    """The phase an event belongs to."""
    op = event.name.split(" ")[1 if event.category == "wait" else 0]
    if event.category == "wait":
        return "send" if op.startswith("send") else "idle"
    if op == "forward":
        return "forward"
    if op in ("backward", "backward_input"):
        return "backward"
    if op == "weight":
        return "weight-grad"
    return "send" if op.startswith("send") else "recv"


@dataclass(frozen=True)
class Span:
    """One bar of the timeline."""

    rank: int
    """World rank."""
    phase: str
    """One of PHASES."""
    start_s: float
    """Seconds from the start of the step's window."""
    end_s: float
    """Seconds from the start of the step's window."""
    micro_batch: int
    """Micro-batch (-1 for gaps)."""
    stage: int
    """Global stage (-1 for gaps)."""


@dataclass(frozen=True)
class StepTimeline:
    """All ranks' spans of one step, gaps filled with idle."""

    step: int
    """0-based step (as in the trace)."""
    ranks: tuple[int, ...]
    """World ranks present."""
    window_s: float
    """From the earliest event start to the latest event end over all ranks."""
    spans: tuple[Span, ...]
    """Events and idle gaps, per rank in time order."""
    stages: dict[int, tuple[int, ...]]
    """Stages each rank ran."""

    def phase_seconds(self, rank: int) -> dict[str, float]:
        """Seconds per phase of one rank (they add up to window_s)."""
        totals = dict.fromkeys(PHASES, 0.0)
        for span in self.spans:
            if span.rank == rank:
                totals[span.phase] += span.end_s - span.start_s
        return totals


def steps_in(events: Sequence[TraceEvent]) -> list[int]:
    """0-based steps that have events."""
    return sorted({e.step for e in events})


def step_timeline(events: Sequence[TraceEvent], step: int) -> StepTimeline:
    """The timeline of one step; gaps between a rank's events (and up to the window's ends)
    become idle spans."""
    chosen = [e for e in events if e.step == step]
    if not chosen:
        raise ValueError(f"no trace events for step {step}")
    origin = min(e.start_s for e in chosen)
    end = max(e.end_s for e in chosen) - origin
    ranks = tuple(sorted({e.rank for e in chosen}))
    spans: list[Span] = []
    stages: dict[int, tuple[int, ...]] = {}
    for rank in ranks:
        mine = sorted((e for e in chosen if e.rank == rank), key=lambda e: e.start_s)
        stages[rank] = tuple(sorted({e.stage for e in mine}))
        cursor = 0.0
        for event in mine:
            start, stop = event.start_s - origin, event.end_s - origin
            if start > cursor:
                spans.append(Span(rank, "idle", cursor, start, -1, -1))
            start = max(start, cursor)
            if stop > start:
                spans.append(Span(rank, phase_of(event), start, stop, event.micro_batch,
                                  event.stage))
            cursor = max(cursor, stop)
        if end > cursor:
            spans.append(Span(rank, "idle", cursor, end, -1, -1))
    return StepTimeline(step, ranks, end, tuple(spans), stages)


def totals_by_rank(events: Sequence[TraceEvent]) -> dict[int, dict[str, float]]:
    """Seconds per phase per rank, summed over every step of the trace."""
    totals: dict[int, dict[str, float]] = {}
    for step in steps_in(events):
        timeline = step_timeline(events, step)
        for rank in timeline.ranks:
            mine = totals.setdefault(rank, dict.fromkeys(PHASES, 0.0))
            for phase, seconds in timeline.phase_seconds(rank).items():
                mine[phase] += seconds
    return totals


def step_bubble(record: StepRecord) -> float | None:
    """Measured bubble fraction of one step (native timers), None without per-rank data."""
    if not record.ranks:
        return None
    slowest = max(r.pipeline_s for r in record.ranks)
    if slowest <= 0:
        return None
    return 1.0 - sum(r.compute_s for r in record.ranks) / (len(record.ranks) * slowest)


def measured_bubble(records: Sequence[StepRecord]) -> float | None:
    """Median measured bubble over the steps, leaving out each attempt's first (warm-up) step
    when there are others."""
    warm = [r for i, r in enumerate(records) if i and r.attempt == records[i - 1].attempt]
    values = [b for b in (step_bubble(r) for r in warm or records) if b is not None]
    return statistics.median(values) if values else None


def typical_step(records: Sequence[StepRecord], traced: Sequence[int]) -> int:
    """The 0-based traced step whose pipeline time is the median (the first step is left out
    when there are others): the one the timeline shows by default."""
    if not traced:
        raise ValueError("no traced steps")
    by_step = {r.step - 1: r for r in records if r.ranks}
    candidates = [s for s in traced if s in by_step]
    if len(candidates) > 1:
        candidates = candidates[1:]
    if not candidates:
        return traced[-1]
    ordered = sorted(candidates, key=lambda s: max(t.pipeline_s for t in by_step[s].ranks))
    return ordered[len(ordered) // 2]
