"""ZB-H2 (zero-bubble pipeline, Qi et al. 2024): ZB-H1's split backward with a deeper
warm-up, trading activation memory for a bubble that no longer grows with B - W.

The per-rank orders come from a deterministic greedy list scheduler over unit costs
(F = B = W = 1, zero-latency links): at every time step each idle rank runs its most urgent
ready op, in this priority: the next B whose output gradient has arrived (on the last rank:
whose forward has run) > the next F whose input has arrived, if the rank holds fewer than
``cap = 2 * pp - 1`` micro-batches (forward run, W not yet) > the oldest pending W. F, B and
W each run in micro-batch order, so every channel matches in order. For pp = 2, m = 8::

    rank 0: F0 F1 F2 B0 W0 B1 F3 B2 W1 F4 B3 W2 F5 B4 W3 F6 B5 W4 F7 B6 W5 W6 B7 W7
    rank 1: F0 B0 F1 B1 F2 B2 W0 F3 B3 W1 F4 B4 W2 F5 B5 W3 F6 B6 W4 F7 B7 W5 W6 W7

Rank 0 runs ``2 * pp - 1`` forwards before its first gradient arrives (ZB-H1: ``pp``), and
the later ranks defer W the same way, so the gradients are in flight ahead of need and the
W's fill each rank's cool-down for any B up to 2 W.

Memory: peak in-flight micro-batches per rank is ``min(m, 2 * pp - 1)`` on every rank
(ZB-H1: ``min(m, pp)`` on every rank; the table adds at most one receive slot on top).

Bubble (the simulator's idle share of one step up to the slowest rank's end): no schedule
can beat the floor ``(pp - 1) F / ((pp - 1) F + m (F + B + W))``, since the last rank starts
only after ``pp - 1`` forwards and then has ``m (F + B + W)`` of work. (The paper's "zero"
counts each rank from its own start, steps overlapping as a parallelogram; gantry's step ends
with a pipeline-wide gradient-norm all-reduce, so the floor is what is left to win.)
At unit costs ZB-H1 already sits on the floor for m >= pp, and ZB-H2 equals it:
``(pp - 1) / (3m + pp - 1)`` (pp = 2, m = 8: 1/25 = 4%). ZB-H2 wins when B > W: for m >= 2 pp
it stays on the floor whenever B <= 2 W (simulated for B and W from 0.5 F to 2 F; beyond,
e.g. B = 1.3, W = 0.5, it lies between the floor and ZB-H1), while ZB-H1 idles
``(pp - 1)(F + B - W)``. With F = 1, B = 1.3, W = 0.9: ZB-H2 ``(pp - 1) / (pp - 1 + 3.2 m)``
(pp = 2, m = 8: 1/26.6 = 3.76%; pp = 4, m = 8: 3/28.6 = 10.49%) against ZB-H1's
1.4/27 = 5.19% and 4.2/29.8 = 14.09%. For every m < 2 pp ZB-H2 is no worse than ZB-H1.
"""

from __future__ import annotations

from launcher.schedules.table import ComputeStep, Op, ScheduleError


def zb_h2_memory_cap(pp: int) -> int:
    """Most micro-batches a rank holds (forward run, weight gradient not yet)."""
    return 2 * pp - 1


def zb_h2_orders(pp: int, m: int) -> list[list[ComputeStep]]:
    cap = zb_h2_memory_cap(pp)
    # forward_end[r][mb] / backward_end[r][mb]: the time its F / B on rank r has finished
    forward_end: list[dict[int, int]] = [{} for _ in range(pp)]
    backward_end: list[dict[int, int]] = [{} for _ in range(pp)]
    n_f, n_b, n_w = [0] * pp, [0] * pp, [0] * pp
    orders: list[list[ComputeStep]] = [[] for _ in range(pp)]
    t = 0
    while any(w < m for w in n_w):
        progressed = False
        for r in range(pp):
            step = _next_step(r, pp, m, cap, t, n_f, n_b, n_w, forward_end, backward_end)
            if step is None:
                continue
            op, _, mb = step
            if op is Op.FORWARD:
                forward_end[r][mb] = t + 1
                n_f[r] += 1
            elif op is Op.BACKWARD_INPUT:
                backward_end[r][mb] = t + 1
                n_b[r] += 1
            else:
                n_w[r] += 1
            orders[r].append(step)
            progressed = True
        if not progressed:  # unit costs: nothing ran at t, so nothing ever will
            raise ScheduleError(f"zb-h2 pp={pp} m={m}: greedy scheduler stuck at step {t}")
        t += 1
    return orders


def _next_step(r: int, pp: int, m: int, cap: int, t: int, n_f: list[int], n_b: list[int],
               n_w: list[int], forward_end: list[dict[int, int]],
               backward_end: list[dict[int, int]]) -> ComputeStep | None:
    """Rank r's most urgent op that is ready at time t (None: it idles this step)."""
    mb = n_b[r]
    if mb < n_f[r]:
        grad_from = forward_end[r] if r == pp - 1 else backward_end[r + 1]
        if grad_from.get(mb, t + 1) <= t:
            return Op.BACKWARD_INPUT, r, mb
    mb = n_f[r]
    input_arrived = r == 0 or forward_end[r - 1].get(mb, t + 1) <= t
    if mb < m and n_f[r] - n_w[r] < cap and input_arrived:
        return Op.FORWARD, r, mb
    if n_w[r] < n_b[r]:
        return Op.WEIGHT, r, n_w[r]
    return None

