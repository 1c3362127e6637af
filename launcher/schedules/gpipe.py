"""GPipe: every forward of the step, then every backward (peak in-flight = m per rank)."""

from __future__ import annotations

from launcher.schedules.table import ComputeStep, Op


def gpipe_orders(pp: int, m: int) -> list[list[ComputeStep]]:
    """Rank r runs F(r, 0..m-1) then B(r, 0..m-1)."""
    return [
        [(Op.FORWARD, r, mb) for mb in range(m)] + [(Op.BACKWARD, r, mb) for mb in range(m)]
        for r in range(pp)
    ]
