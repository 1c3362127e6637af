"""ZB-interleaved: interleaved placement (v chunks per rank, stage s on rank s % pp, chunk
s // pp) with the zero-bubble split backward (F, B = input gradient, W = weight gradient).

With v chunks the last rank waits only for ``pp - 1`` forwards of a *chunk* (1/v of a stage)
before it starts, instead of whole stages (zb-h1/zb-h2), and the W passes fill what would
otherwise be idle. The orders come from a deterministic greedy list scheduler (event-driven,
zero-latency links): each idle rank runs its most urgent ready op, a B whose output gradient
is there before an F whose input is there (or the F first: a candidate) if the rank holds
fewer than ``cap`` chunk-micro-batches (forward run, W not yet), else the oldest pending W; of
two ready F's (B's) the one further along the pipeline. A rank consumes a channel's messages
in the order they were sent (the table needs it), so every stage runs its F's and B's in
micro-batch order; m need not be a multiple of pp. Candidates (cap, B or F first, planned at
unit or about the measured op times) are proven by the simulator and the one with the
smallest makespan at :data:`SELECT_COSTS` wins (ties: at unit costs, then the first made).

Memory: a rank holds at most ``v (2 pp - 1)`` chunk-micro-batches, zb-h2's ``2 pp - 1``
stages of activations; the winners hold less: at pp = 2, m >= 4: 5 (2.5 stages; zb-h2 3),
slots (4, 4, 2, 2) per stage. For pp = 2, m = 8 (F2.5: stage 2, micro-batch 5)::

    rank 0: F0.0 F0.1 F2.0 F2.1 F0.2 B2.0 W2.0 F0.3 B2.1 B0.0 W2.1 B0.1 F2.2 W0.0 F2.3 W0.1
            F0.4 B2.2 W2.2 B2.3 B0.2 F0.5 B0.3 W2.3 F2.4 W0.2 F2.5 W0.3 F0.6 B2.4 W2.4 B2.5
            B0.4 F0.7 B0.5 W2.5 F2.6 W0.4 F2.7 W0.5 B2.6 W2.6 B2.7 B0.6 B0.7 W2.7 W0.6 W0.7
    rank 1: F1.0 F1.1 F3.0 B3.0 F3.1 B3.1 B1.0 F1.2 B1.1 W3.0 F1.3 W3.1 W1.0 F3.2 B3.2 F3.3
            B3.3 B1.2 W1.1 B1.3 F1.4 W3.2 F1.5 W3.3 W1.2 F3.4 B3.4 F3.5 B3.5 B1.4 W1.3 B1.5
            F1.6 W3.4 F1.7 W3.5 W1.4 F3.6 B3.6 F3.7 B3.7 B1.6 B1.7 W1.5 W3.6 W3.7 W1.6 W1.7

Bubble (simulator): the floor is ``(pp - 1) F / v`` of fill before the last rank's
``m (F + B + W)``. At unit costs (F = B = W = 1 per stage) pp = 2, m = 8: 1/49 = 2.0%
(zb-h1, zb-h2 1/25 = 4.0%, interleaved 1/17 = 5.9%). At the measured 1.5B times: makespan
337.85 ms, on the floor, against zb-h2's 344.57 and interleaved's 351.82; on the floor for
every m >= 2 pp at pp = 2, 3, 4 and below zb-h2 for m <= pp; for pp < m < 2 pp mostly below
zb-h2 but not always (pp = 3, m = 4: 194.07 vs 192.46 ms).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from functools import lru_cache
from heapq import heappop, heappush

from launcher.schedules.simulator import UNIT_COSTS
from launcher.schedules.table import ComputeStep, Op, ScheduleError, ScheduleTable, build_table
from launcher.schedules.timing import makespan

SELECT_COSTS: dict[Op, float] = {
    Op.FORWARD: 13.45, Op.BACKWARD_INPUT: 16.68, Op.WEIGHT: 11.26, Op.BACKWARD: 27.94,
}
"""Per-stage op times (ms) of the 1.5B model measured on 2x H200 (docs/jobs.md, zb-interleaved)."""
_GREEDY_COSTS = ({Op.FORWARD: 1, Op.BACKWARD_INPUT: 1, Op.WEIGHT: 1},
                 {Op.FORWARD: 20, Op.BACKWARD_INPUT: 25, Op.WEIGHT: 17})
"""Integer op times the greedy plans with: unit, and about the measured ratios."""
_SLACK = 1e-3
"""Added to the bound the greedy prunes with: far more than its float sums can stray from the
simulator's (the same costs, added in another order), far less than any two makespans at
SELECT_COSTS differ by, so it prunes only candidates the simulator would also drop."""

Channel = tuple[int, int, Op]
"""(source rank, destination rank, FORWARD for activations | BACKWARD_INPUT for gradients)."""
Orders = tuple[tuple[ComputeStep, ...], ...]
"""Per-rank compute orders, hashable."""
Candidate = tuple[Op, int, int, Channel | None]
"""(op, stage, micro-batch, the channel its input comes from; None: data, loss or local)."""


def zb_interleaved_memory_cap(pp: int, v: int) -> int:
    """Most chunk-micro-batches a rank may hold: zb-h2's ``2 pp - 1`` stages' worth."""
    return v * (2 * pp - 1)


def zb_interleaved_orders(pp: int, m: int, v: int) -> list[list[ComputeStep]]:
    if v < 2:
        raise ScheduleError(f"zb-interleaved: virtual_stages({v}) must be >= 2")
    return [list(order) for order in _best_orders(pp, m, v)]


@lru_cache(maxsize=64)
def _best_orders(pp: int, m: int, v: int) -> Orders:
    """The winning candidate: smallest makespan at SELECT_COSTS (rounded to 1e-6), then at
    unit costs, then the first made. Each candidate's makespan comes from
    :func:`launcher.schedules.timing.makespan` (the simulator's, bit for bit), stopped early
    once it cannot tie the best so far. The candidates planned about the measured ratios
    are tried first (they usually win, so the bound is tight early); the order they were
    made in still breaks ties, and the unit-cost candidates (made first) end the search at
    the first one on both floors, which no other can beat. Every cap keeps a rank within
    ``limit`` (the greedy holds at most ``cap``), so all candidates fit."""
    limit = zb_interleaved_memory_cap(pp, v)
    floors = _floors(pp, m, v)
    caps = _caps(v, limit)
    seen: set[Orders] = set()
    best: float | None = None
    tied: list[tuple[int, Orders]] = []  # (order made, candidate) at ``best``
    ceiling = _ceiling(pp, m, v, limit)
    for phase, costs in ((1, _GREEDY_COSTS[1]), (0, _GREEDY_COSTS[0])):
        for index, (backward_first, cap) in enumerate(caps, start=phase * len(caps)):
            cut = best if best is not None else ceiling
            bound = None if cut is None else cut + 1e-6 + _SLACK
            orders = _greedy(pp, m, v, cap, costs, backward_first, bound)
            if orders is None or orders in seen:
                continue
            seen.add(orders)
            table = _table(pp, m, v, orders)
            found = makespan(table, SELECT_COSTS, None if cut is None else cut + 1e-6)
            if found is None:
                continue
            rounded = round(found, 6)
            if best is None or rounded < best:
                best, tied = rounded, [(index, orders)]
            elif rounded == best:
                tied.append((index, orders))
            else:
                continue
            if (phase == 0 and floors is not None and rounded == floors[0]
                    and makespan(table, UNIT_COSTS) == floors[1]):
                return orders  # first made among those on both floors
    if not tied:
        raise ScheduleError(f"zb-interleaved pp={pp} m={m} v={v}: no schedule fits in "
                            f"{limit} chunk-micro-batches per rank")
    tied.sort(key=lambda item: item[0])
    units = [makespan(_table(pp, m, v, orders), UNIT_COSTS) for _, orders in tied]
    return tied[units.index(min(u for u in units if u is not None))][1]


def _ceiling(pp: int, m: int, v: int, limit: int) -> float | None:
    """A makespan at SELECT_COSTS that the winner does not exceed: the best of a few
    candidates of the kind that usually wins (planned about the measured ratios, backward
    first, a cap near the limit), rounded as the search rounds. Each is a candidate the
    search makes again, so the winner is no worse; it only lets the search drop the others
    sooner."""
    best: float | None = None
    for cap in sorted({limit, max(v, limit * 7 // 8), max(v, limit * 3 // 4)}, reverse=True):
        bound = None if best is None else best + 1e-6 + _SLACK
        orders = _greedy(pp, m, v, cap, _GREEDY_COSTS[1], True, bound)
        if orders is None:
            continue
        found = makespan(_table(pp, m, v, orders), SELECT_COSTS,
                         None if best is None else best + 1e-6)
        if found is not None and (best is None or round(found, 6) < best):
            best = round(found, 6)
    return best


def _caps(v: int, limit: int) -> list[tuple[bool, int]]:
    """(backward first, cap) in the order the candidates are made."""
    return [(backward_first, cap) for cap in range(v, limit + 1)
            for backward_first in (True, False)]


def _floors(pp: int, m: int, v: int) -> tuple[float, float] | None:
    """No table ends sooner than the last rank's wait for pp - 1 chunk forwards plus its
    m (F + B + W): (at SELECT_COSTS rounded as candidates are, at unit costs). None where
    the floats are not exact enough to compare with (v not 1, 2, 4 or 8)."""
    if v not in (1, 2, 4, 8):
        return None
    work = SELECT_COSTS[Op.FORWARD] + SELECT_COSTS[Op.BACKWARD_INPUT] + SELECT_COSTS[Op.WEIGHT]
    select = round((pp - 1) * SELECT_COSTS[Op.FORWARD] / v + m * work, 6)
    return select, (pp - 1) / v + 3.0 * m


def _table(pp: int, m: int, v: int, orders: Orders) -> ScheduleTable:
    return build_table("zb-interleaved", pp, v, m, [list(order) for order in orders])


def _greedy(pp: int, m: int, v: int, cap: int, cost: dict[Op, int],
            backward_first: bool, bound: float | None = None) -> Orders | None:
    """Per-rank orders of the list scheduler; None when the cap makes it stall, or (with a
    ``bound``) once the table of these orders provably ends after ``bound`` at
    SELECT_COSTS.

    Event-driven: at each time only the ranks that just finished an op and their two ring
    neighbours (the only ones whose inputs can have changed) look for work; ranks deciding at
    the same time never see each other's new messages (those are ready later), so this runs
    the same decisions as visiting every rank at every time, in a time linear in the ops.
    The bound: alongside, each op's earliest end at SELECT_COSTS given its rank's previous op
    and its input's producer; the table's makespan is no less (its waits add to these
    dependencies, never remove one), so a rank whose earliest end plus its compute still to
    come is past ``bound`` proves the candidate cannot tie."""
    last = pp * v - 1
    fwd_op, bwd_op, w_op = Op.FORWARD, Op.BACKWARD_INPUT, Op.WEIGHT
    c_fwd, c_bwd, c_w = cost[fwd_op], cost[bwd_op], cost[w_op]
    s_fwd, s_bwd, s_w = (SELECT_COSTS[fwd_op] / v, SELECT_COSTS[bwd_op] / v,
                         SELECT_COSTS[w_op] / v)
    limit = float("inf") if bound is None else bound
    # per rank r: messages on its input channels in send order, as (stage, mb, ready time,
    # earliest end of the producer at SELECT_COSTS), and how many it has consumed
    acts: list[list[tuple[int, int, int, float]]] = [[] for _ in range(pp)]
    grads: list[list[tuple[int, int, int, float]]] = [[] for _ in range(pp)]
    acts_taken, grads_taken = [0] * pp, [0] * pp
    next_data = 0  # stage 0's next micro-batch
    next_loss = 0  # the last stage's next backward
    loss_rank = last % pp
    forward_end: dict[int, int] = {}  # last stage: micro-batch -> end of its forward
    weights: list[deque[tuple[int, int]]] = [deque() for _ in range(pp)]  # pending W
    live, busy = [0] * pp, [0] * pp
    early = [0.0] * pp  # earliest end of the rank's last op at SELECT_COSTS
    rest = [m * (s_fwd + s_bwd + s_w) * v] * pp  # its compute still to come, same costs
    orders: list[list[ComputeStep]] = [[] for _ in range(pp)]
    events: list[tuple[int, int]] = []  # (end, rank) of the op each busy rank runs
    t, remaining = 0, 3 * (last + 1) * m
    awake: Iterable[int] = range(pp)
    while True:
        for r in awake:
            if busy[r] > t:
                continue
            # candidates: (stage, mb, earliest end of the input's producer, source)
            # source: 1 acts channel, 2 grads channel, 3 data, 4 loss
            back: tuple[int, int, float, int] | None = None
            queue, index = grads[r], grads_taken[r]
            if index < len(queue) and queue[index][2] <= t:
                msg = queue[index]
                back = (msg[0], msg[1], msg[3], 2)
            # of two ready B's the one further along (lower stage): the loss's comes last
            if back is None and r == loss_rank and forward_end.get(next_loss, t + 1) <= t:
                back = (last, next_loss, 0.0, 4)
            fwd: tuple[int, int, float, int] | None = None
            if live[r] < cap:
                queue, index = acts[r], acts_taken[r]
                if index < len(queue) and queue[index][2] <= t:
                    msg = queue[index]
                    fwd = (msg[0], msg[1], msg[3], 1)
                elif r == 0 and next_data < m:
                    fwd = (0, next_data, 0.0, 3)
            if backward_first:
                op, choice = (bwd_op, back) if back is not None else (fwd_op, fwd)
            else:
                op, choice = (fwd_op, fwd) if fwd is not None else (bwd_op, back)
            if choice is None:
                if not weights[r]:
                    continue
                stage, mb = weights[r].popleft()
                op, ready, source = w_op, 0.0, 0
            else:
                stage, mb, ready, source = choice
            if source == 1:
                acts_taken[r] += 1
            elif source == 2:
                grads_taken[r] += 1
            if op is fwd_op:
                busy[r] = end = t + c_fwd
                done = max(early[r], ready) + s_fwd
                rest[r] -= s_fwd
                live[r] += 1
                if source == 3:
                    next_data += 1
                if stage == last:
                    forward_end[mb] = end
                else:
                    acts[(r + 1) % pp].append((stage + 1, mb, end, done))
            elif op is bwd_op:
                busy[r] = end = t + c_bwd
                done = max(early[r], ready) + s_bwd
                rest[r] -= s_bwd
                weights[r].append((stage, mb))
                if source == 4:
                    next_loss += 1
                if stage > 0:
                    grads[(r - 1) % pp].append((stage - 1, mb, end, done))
            else:
                busy[r] = end = t + c_w
                done = early[r] + s_w
                rest[r] -= s_w
                live[r] -= 1
            early[r] = done
            if done + rest[r] > limit:
                return None  # this candidate's table cannot end by the bound
            orders[r].append((op, stage, mb))
            remaining -= 1
            heappush(events, (end, r))
        if not remaining:
            return tuple(tuple(order) for order in orders)
        if not events:
            return None  # nothing runs and nothing will finish: the cap stalls it
        t = events[0][0]
        woken: set[int] = set()
        while events and events[0][0] == t:
            r = heappop(events)[1]
            woken.update((r, (r + 1) % pp, (r - 1) % pp))
        awake = sorted(woken)
