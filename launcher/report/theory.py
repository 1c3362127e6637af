"""The schedule's own bubble: its action table run on the schedules package's abstract
machine with unit costs (forward = backward-input = weight-grad = 1, full backward = 2), and
again with the op costs measured in the trace (mean seconds per op and full stage)."""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from launcher.report.run_data import TraceEvent
from launcher.schedules import Op, ScheduleError, generate, simulate
from launcher.schedules.compare import compare, split_full_backward
from launcher.schedules.simulator import with_unit_defaults

_OPS = {"forward": Op.FORWARD, "backward": Op.BACKWARD, "backward_input": Op.BACKWARD_INPUT,
        "weight": Op.WEIGHT}


@dataclass(frozen=True)
class TheoreticalBubble:
    """What the schedule costs with unit op times."""

    schedule: str
    """Schedule name."""
    pp: int
    """Pipeline ranks."""
    micro_batches: int
    """Micro-batches per step (m)."""
    virtual_stages: int
    """Chunks per rank (v)."""
    fraction: float
    """Idle share of all pipeline ranks' time up to the makespan (unit costs)."""
    with_measured_costs: float | None = None
    """The same with the trace's mean op times (None without a trace)."""
    alternatives: tuple[tuple[str, float], ...] = ()
    """Every schedule possible at this layout (the chunked ones with max(v, 2) chunks) and
    its bubble at the same costs (the trace's op times, a full backward split evenly into
    input and weight gradients; else unit costs)."""

    def describe(self) -> str:
        chunks = f" v={self.virtual_stages}" if self.virtual_stages > 1 else ""
        return f"{self.schedule} pp={self.pp} m={self.micro_batches}{chunks}"


def measured_op_costs(events: Sequence[TraceEvent], virtual_stages: int = 1,
                      skip_first_step: bool = True) -> dict[Op, float]:
    """Mean seconds of each compute op per full stage (a chunk's time x v), over the traced
    steps (the first, warm-up step left out when there are others)."""
    steps = sorted({e.step for e in events})
    keep = set(steps[1:] if skip_first_step and len(steps) > 1 else steps)
    durations: dict[Op, list[float]] = {}
    for event in events:
        op = _OPS.get(event.name.split(" ")[0]) if event.category == "compute" else None
        if op is not None and event.step in keep:
            durations.setdefault(op, []).append((event.end_s - event.start_s) * virtual_stages)
    return {op: statistics.fmean(values) for op, values in durations.items()}


def theoretical_bubble(schedule: str, pp: int, micro_batches: int, virtual_stages: int = 1,
                       costs: Mapping[Op, float] | None = None) -> TheoreticalBubble:
    """Simulate the schedule's table with unit costs and, given ``costs``, with those (ops
    missing from ``costs`` keep their unit cost; a full backward defaults to backward-input +
    weight-grad). Raises ScheduleError for an impossible layout."""
    table = generate(schedule, pp, micro_batches, virtual_stages)
    measured = None
    if costs:
        measured = simulate(table, with_unit_defaults(costs)).bubble_fraction
    rows = compare(pp, micro_batches, max(virtual_stages, 2),
                   split_full_backward(costs) if costs else None)
    alternatives = tuple((f"{r.schedule} v={r.virtual_stages}" if r.virtual_stages > 1
                          else r.schedule, r.bubble) for r in rows if r.bubble is not None)
    return TheoreticalBubble(schedule, pp, micro_batches, virtual_stages,
                             simulate(table).bubble_fraction, measured, alternatives)


__all__ = ["ScheduleError", "TheoreticalBubble", "theoretical_bubble"]
