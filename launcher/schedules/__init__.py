"""Pipeline schedules: per-rank action tables generated once, proven by the simulator.

``generate(name, pp, m, v)`` returns a :class:`ScheduleTable` for gpipe, 1f1b, interleaved
(v chunks per rank), zb-h1, zb-h2 or zb-interleaved (v chunks per rank, split backward),
built from the per-rank ``compute_orders``; ``simulate`` proves and costs it.
"""

from __future__ import annotations

from collections.abc import Callable

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
from launcher.schedules.zb_interleaved import zb_interleaved_orders, zb_interleaved_table

_Orders = Callable[[int, int, int], list[list[ComputeStep]]]

_GENERATORS: dict[str, tuple[_Orders, bool]] = {
    "gpipe": (lambda pp, m, v: gpipe_orders(pp, m), False),
    "1f1b": (lambda pp, m, v: one_f_one_b_orders(pp, m), False),
    "interleaved": (interleaved_orders, True),
    "zb-h1": (lambda pp, m, v: zb_h1_orders(pp, m), False),
    "zb-h2": (lambda pp, m, v: zb_h2_orders(pp, m), False),
    "zb-interleaved": (zb_interleaved_orders, True),
}
"""The one list of schedules: name -> (per-rank compute orders of (pp, m, v), whether it
takes v >= 2 chunks per rank). job_spec.Schedule spells the same names for the type checker
(a test holds them equal)."""

SCHEDULES = tuple(_GENERATORS)
CHUNKED = tuple(name for name, (_, chunked) in _GENERATORS.items() if chunked)
"""Schedules that take v >= 2 chunks per rank (virtual_stages); the others take v = 1."""

__all__ = [
    "CHUNKED", "SCHEDULES", "Action", "Op", "ScheduleError", "ScheduleTable", "SimResult",
    "compute_orders", "generate", "simulate", "table_from_bytes",
]


_TABLES: dict[str, Callable[[int, int, int], ScheduleTable]] = {
    "zb-interleaved": zb_interleaved_table,
}
"""Schedules whose generator builds the table itself (its search prices tables)."""


def compute_orders(name: str, pp: int, m: int, v: int = 1) -> list[list[ComputeStep]]:
    """The per-rank compute orders of schedule ``name`` (before communication and slots)."""
    _check(name, pp, m, v)
    return _GENERATORS[name][0](pp, m, v)


def generate(name: str, pp: int, m: int, v: int = 1) -> ScheduleTable:
    """The action table of schedule ``name`` for pp ranks, m micro-batches, v chunks/rank."""
    _check(name, pp, m, v)
    if name in _TABLES:
        return _TABLES[name](pp, m, v)
    return build_table(name, pp, v, m, _GENERATORS[name][0](pp, m, v))


def _check(name: str, pp: int, m: int, v: int) -> None:
    if pp < 1 or m < 1 or v < 1:
        raise ScheduleError(f"{name}: pp({pp}), m({m}) and v({v}) must be >= 1")
    if name in SCHEDULES and name not in CHUNKED and v != 1:
        raise ScheduleError(f"{name}: virtual_stages({v}) needs schedule 'interleaved' "
                            "or 'zb-interleaved'")
    if name not in _GENERATORS:
        raise ScheduleError(f"unknown schedule {name!r} (expected one of "
                            f"{', '.join(SCHEDULES)})")
