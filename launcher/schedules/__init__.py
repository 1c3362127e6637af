"""Pipeline schedules: per-rank action tables generated once, proven by the simulator.

``generate(name, pp, m, v)`` returns a :class:`ScheduleTable` for gpipe, 1f1b, interleaved
(v chunks per rank), zb-h1, zb-h2 or zb-interleaved (v chunks per rank, split backward),
built from the per-rank ``compute_orders``; ``simulate`` proves and costs it.
"""

from __future__ import annotations

from launcher.schedules.gpipe import gpipe_orders
from launcher.schedules.interleaved import interleaved_orders
from launcher.schedules.one_f_one_b import one_f_one_b_orders
from launcher.schedules.simulator import SimResult, simulate
from launcher.schedules.table import (
    Action,
    ComputeStep,
    Op,
    ScheduleError,
    ScheduleTable,
    build_table,
    table_from_bytes,
)
from launcher.schedules.zb_h1 import zb_h1_orders
from launcher.schedules.zb_h2 import zb_h2_orders
from launcher.schedules.zb_interleaved import zb_interleaved_orders

SCHEDULES = ("gpipe", "1f1b", "interleaved", "zb-h1", "zb-h2", "zb-interleaved")
CHUNKED = ("interleaved", "zb-interleaved")
"""Schedules that take v >= 2 chunks per rank (virtual_stages); the others take v = 1."""

__all__ = [
    "CHUNKED", "SCHEDULES", "Action", "Op", "ScheduleError", "ScheduleTable", "SimResult",
    "compute_orders", "generate", "simulate", "table_from_bytes",
]


def compute_orders(name: str, pp: int, m: int, v: int = 1) -> list[list[ComputeStep]]:
    """The per-rank compute orders of schedule ``name`` (before communication and slots)."""
    if pp < 1 or m < 1 or v < 1:
        raise ScheduleError(f"{name}: pp({pp}), m({m}) and v({v}) must be >= 1")
    if name in SCHEDULES and name not in CHUNKED and v != 1:
        raise ScheduleError(f"{name}: virtual_stages({v}) needs schedule 'interleaved' "
                            "or 'zb-interleaved'")
    if name == "gpipe":
        return gpipe_orders(pp, m)
    if name == "1f1b":
        return one_f_one_b_orders(pp, m)
    if name == "interleaved":
        return interleaved_orders(pp, m, v)
    if name == "zb-h1":
        return zb_h1_orders(pp, m)
    if name == "zb-h2":
        return zb_h2_orders(pp, m)
    if name == "zb-interleaved":
        return zb_interleaved_orders(pp, m, v)
    raise ScheduleError(f"unknown schedule {name!r} (expected one of {', '.join(SCHEDULES)})")


def generate(name: str, pp: int, m: int, v: int = 1) -> ScheduleTable:
    """The action table of schedule ``name`` for pp ranks, m micro-batches, v chunks/rank."""
    return build_table(name, pp, v, m, compute_orders(name, pp, m, v))
