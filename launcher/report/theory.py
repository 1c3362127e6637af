"""The schedule's own bubble: its action table run on the schedules package's abstract
machine with unit costs (forward = backward-input = weight-grad = 1, full backward = 2)."""

from __future__ import annotations

from dataclasses import dataclass

from launcher.schedules import ScheduleError, generate, simulate


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
    """Idle share of all pipeline ranks' time up to the makespan."""

    def describe(self) -> str:
        chunks = f" v={self.virtual_stages}" if self.virtual_stages > 1 else ""
        return f"{self.schedule} pp={self.pp} m={self.micro_batches}{chunks}"


def theoretical_bubble(schedule: str, pp: int, micro_batches: int,
                       virtual_stages: int = 1) -> TheoreticalBubble:
    """Simulate the schedule's table (raises ScheduleError for an impossible layout)."""
    table = generate(schedule, pp, micro_batches, virtual_stages)
    return TheoreticalBubble(schedule, pp, micro_batches, virtual_stages,
                             simulate(table).bubble_fraction)


__all__ = ["ScheduleError", "TheoreticalBubble", "theoretical_bubble"]
