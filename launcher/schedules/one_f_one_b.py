"""1F1B (PipeDream-flush): warm-up forwards, then one forward / one backward, then drain.

Rank r runs ``min(pp - r - 1, m)`` warm-up forwards, so at most ``pp - r`` micro-batches
are in flight on it (peak ``pp`` on rank 0) instead of GPipe's ``m``.
"""

from __future__ import annotations

from launcher.schedules.table import ComputeStep, Op


def one_f_one_b_orders(pp: int, m: int) -> list[list[ComputeStep]]:
    orders: list[list[ComputeStep]] = []
    for r in range(pp):
        warmup = min(pp - r - 1, m)
        order: list[ComputeStep] = [(Op.FORWARD, r, mb) for mb in range(warmup)]
        for k in range(m - warmup):
            order.append((Op.FORWARD, r, warmup + k))
            order.append((Op.BACKWARD, r, k))
        order.extend((Op.BACKWARD, r, mb) for mb in range(m - warmup, m))
        orders.append(order)
    return orders
