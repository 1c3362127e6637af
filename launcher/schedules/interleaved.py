"""Interleaved 1F1B (Megatron-LM): v model chunks per rank, stage s = chunk * pp + rank.

Order of Megatron's ``forward_backward_pipelining_with_interleaving``: virtual micro-batch
k (0 .. v*m-1) runs chunk ``(k // pp) % v`` on micro-batch ``(k // (pp*v)) * pp + k % pp``
(backwards visit chunks in reverse); rank r warms up with ``(pp - r - 1) * 2 + (v - 1) * pp``
forwards, then alternates one forward and one backward, then drains.
Like Megatron, m must be a multiple of pp (checked; the error says so).
"""

from __future__ import annotations

from launcher.schedules.table import ComputeStep, Op, ScheduleError


def _micro_batch(k: int, pp: int, v: int) -> int:
    return (k // (pp * v)) * pp + k % pp


def interleaved_orders(pp: int, m: int, v: int) -> list[list[ComputeStep]]:
    if v < 2:
        raise ScheduleError(f"interleaved: virtual_stages({v}) must be >= 2")
    if m % pp:
        raise ScheduleError(
            f"interleaved: micro_batches({m}) must be a multiple of pp({pp})"
        )
    total = v * m
    orders: list[list[ComputeStep]] = []
    for r in range(pp):

        def fwd(k: int, r: int = r) -> ComputeStep:
            chunk = (k // pp) % v
            return (Op.FORWARD, chunk * pp + r, _micro_batch(k, pp, v))

        def bwd(k: int, r: int = r) -> ComputeStep:
            chunk = v - 1 - (k // pp) % v
            return (Op.BACKWARD, chunk * pp + r, _micro_batch(k, pp, v))

        warmup = min((pp - r - 1) * 2 + (v - 1) * pp, total)
        order = [fwd(k) for k in range(warmup)]
        for k in range(total - warmup):
            order.append(fwd(warmup + k))
            order.append(bwd(k))
        order.extend(bwd(k) for k in range(total - warmup, total))
        orders.append(order)
    return orders
