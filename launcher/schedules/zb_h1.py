"""ZB-H1 (zero-bubble pipeline, Qi et al. 2023): the backward is split into B (input
gradient, on the critical path) and W (weight gradient, needed only by the optimizer).

Rank r runs 1F1B's ``pp - r - 1`` warm-up forwards, then per micro-batch one F and one B,
and delays its W passes by ``r`` micro-batches; the ``r`` delayed W's fill the cool-down,
where 1F1B idles waiting for gradients. With F = B = W = 1 the bubble is
``(pp - 1) / (3m + pp - 1)``, about a third of 1F1B's, and each rank holds at most ``pp``
micro-batches' activations (1F1B's peak, reached on rank 0).
"""

from __future__ import annotations

from launcher.schedules.table import ComputeStep, Op


def zb_h1_orders(pp: int, m: int) -> list[list[ComputeStep]]:
    orders: list[list[ComputeStep]] = []
    for r in range(pp):
        warmup = min(pp - r - 1, m)
        order: list[ComputeStep] = [(Op.FORWARD, r, mb) for mb in range(warmup)]
        next_w = 0
        for k in range(m):
            if warmup + k < m:
                order.append((Op.FORWARD, r, warmup + k))
            order.append((Op.BACKWARD_INPUT, r, k))
            if k - next_w >= r:
                order.append((Op.WEIGHT, r, next_w))
                next_w += 1
        order.extend((Op.WEIGHT, r, mb) for mb in range(next_w, m))
        orders.append(order)
    return orders
