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

The search runs its greedies, tables and makespans in C (``zb_native.c``, compiled on first
use: :mod:`launcher.schedules.native`) where the system's compiler builds it, else in the
Python here, which is the reference: both make the same table (tests hold them equal), and
the winner's table, built during the search, is what ``generate`` returns. At pp = 64,
m = 512 that is ~0.4 s in C and ~14 s in Python on 2 cores (docs/BENCHMARKS.md).
"""

from __future__ import annotations

import ctypes
from collections import deque
from collections.abc import Callable, Hashable, Mapping
from functools import lru_cache
from heapq import heappop, heappush
from typing import Protocol

import numpy as np

from launcher.schedules import native
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

Orders = tuple[tuple[ComputeStep, ...], ...]
"""Per-rank compute orders, hashable."""


def zb_interleaved_memory_cap(pp: int, v: int) -> int:
    """Most chunk-micro-batches a rank may hold: zb-h2's ``2 pp - 1`` stages' worth."""
    return v * (2 * pp - 1)


def zb_interleaved_orders(pp: int, m: int, v: int) -> list[list[ComputeStep]]:
    """The winner's per-rank compute orders (read off its table)."""
    table = zb_interleaved_table(pp, m, v)
    compute = (int(Op.FORWARD), int(Op.BACKWARD_INPUT), int(Op.WEIGHT))
    return [[(Op(op), stage, mb) for op, stage, mb in rows[np.isin(rows[:, 0], compute), :3]
             .tolist()] for rows in table.rows]


def zb_interleaved_table(pp: int, m: int, v: int) -> ScheduleTable:
    """The winner's table, the one the search built (what ``generate`` returns)."""
    if v < 2:
        raise ScheduleError(f"zb-interleaved: virtual_stages({v}) must be >= 2")
    return _best_table(pp, m, v)


@lru_cache(maxsize=16)
def _best_table(pp: int, m: int, v: int) -> ScheduleTable:
    """The search in C (:mod:`launcher.schedules.native`) where it is built, else (or if it
    refuses an input) in Python: the same table."""
    lib = native.library()
    if lib is not None:
        try:
            return _search(_NativeEngine(lib, pp, m, v))
        except _Refused:
            pass
    return _search(_PythonEngine(pp, m, v))


Key = Hashable
"""A candidate's orders as an engine keeps them (equal keys: equal orders)."""


class _Engine:
    """What the search runs on: greedies, the tables of their orders, makespans."""

    def __init__(self, pp: int, m: int, v: int) -> None:
        self.pp, self.m, self.v = pp, m, v

    def start(self) -> _State:
        raise NotImplementedError

    def run(self, g: _State, cap: int, phase: int, backward_first: bool, bound: float | None,
            fork: Fork | None) -> Key | None:
        """:func:`_run` from ``g`` with ``_GREEDY_COSTS[phase]``: the orders' key or None."""
        raise NotImplementedError

    def table(self, key: Key) -> ScheduleTable:
        raise NotImplementedError

    def makespan(self, table: ScheduleTable, costs: Mapping[Op, float],
                 bound: float | None = None) -> float | None:
        return makespan(table, costs, bound)


class _PythonEngine(_Engine):
    """The reference: keys are the orders themselves."""

    def start(self) -> _State:
        return _Greedy(self.pp, self.m, self.v)

    def run(self, g: _State, cap: int, phase: int, backward_first: bool, bound: float | None,
            fork: Fork | None) -> Key | None:
        assert isinstance(g, _Greedy)
        return _run(g, cap, _GREEDY_COSTS[phase], backward_first, bound, fork)

    def table(self, key: Key) -> ScheduleTable:
        assert isinstance(key, tuple)
        return _table(self.pp, self.m, self.v, key)


class _Refused(Exception):
    """zb_native.c declined an input; the search starts over in Python."""


class _NativeEngine(_Engine):
    """zb_native.c: keys are the orders' int32 bytes."""

    def __init__(self, lib: ctypes.CDLL, pp: int, m: int, v: int) -> None:
        super().__init__(pp, m, v)
        self.lib = lib
        self.select = (SELECT_COSTS[Op.FORWARD] / v, SELECT_COSTS[Op.BACKWARD_INPUT] / v,
                       SELECT_COSTS[Op.WEIGHT] / v)
        self.costs = [(c[Op.FORWARD], c[Op.BACKWARD_INPUT], c[Op.WEIGHT]) for c in _GREEDY_COSTS]

    def start(self) -> _State:
        return native.Greedy.new(self.lib, self.pp, self.m, self.v, _compute_left(self.m))

    def run(self, g: _State, cap: int, phase: int, backward_first: bool, bound: float | None,
            fork: Fork | None) -> Key | None:
        assert isinstance(g, native.Greedy)
        parted = self.v if fork is not None else -1
        while True:
            limit = float("inf") if bound is None else bound
            status, held = g.run(cap, self.costs[phase], backward_first, self.select, limit,
                                 parted)
            if status == native.FORK and fork is not None:
                bound = fork(g, range(parted, held + 1), bound)
                parted = held + 1
            elif status == native.DONE:
                return g.orders()
            elif status in (native.STALL, native.PAST):
                return None
            else:
                raise _Refused

    def table(self, key: Key) -> ScheduleTable:
        assert isinstance(key, bytes)
        orders = np.frombuffer(key, dtype=np.int32).reshape(self.pp, -1, 3)
        made = native.rank_rows(self.lib, self.pp, self.v, self.m, list(orders))
        if made is None:
            raise _Refused
        rows, slots = made
        return ScheduleTable("zb-interleaved", self.pp, self.v, self.m, tuple(rows), slots)

    def makespan(self, table: ScheduleTable, costs: Mapping[Op, float],
                 bound: float | None = None) -> float | None:
        status, found = native.makespan(self.lib, table, costs, bound)
        if status == native.DONE:
            return found
        if status == native.PAST:
            return None
        return makespan(table, costs, bound)  # the reference says what is wrong


def _search(engine: _Engine) -> ScheduleTable:
    """The winning candidate's table: smallest makespan at SELECT_COSTS (rounded to 1e-6),
    then at unit costs, then the first made. Each candidate's makespan comes from
    :func:`launcher.schedules.timing.makespan` (the simulator's, bit for bit). The candidates
    planned about the measured ratios are looked at first; the order they were made in
    still breaks ties, and the unit-cost candidates (made first) end the search at the first
    one on both floors, which no other can beat. Every cap keeps a rank within ``limit``
    (the greedy holds at most ``cap``), so all candidates fit. :func:`_candidates` runs the
    greedies and prices the tables that can win; this replays the choice over them."""
    pp, m, v = engine.pp, engine.m, engine.v
    limit = zb_interleaved_memory_cap(pp, v)
    floors = _floors(pp, m, v)
    caps = _caps(v, limit)
    made, priced, ceiling = _candidates(engine, limit)
    seen: set[Key] = set()
    best: float | None = None
    tied: list[tuple[int, Key]] = []  # (order made, candidate) at ``best``
    for phase in (1, 0):
        for index, (backward_first, cap) in enumerate(caps, start=phase * len(caps)):
            orders = made[phase, backward_first, cap]
            if orders is None or orders in seen:
                continue
            seen.add(orders)
            table, found = priced[orders]
            cut = best if best is not None else ceiling
            if found is None or (cut is not None and found > cut + 1e-6):
                continue  # what makespan(table, SELECT_COSTS, cut + 1e-6) answers
            rounded = round(found, 6)
            if best is None or rounded < best:
                best, tied = rounded, [(index, orders)]
            elif rounded == best:
                tied.append((index, orders))
            else:
                continue
            if (phase == 0 and floors is not None and rounded == floors[0]
                    and engine.makespan(table, UNIT_COSTS) == floors[1]):
                return table  # first made among those on both floors
    if not tied:
        raise ScheduleError(f"zb-interleaved pp={pp} m={m} v={v}: no schedule fits in "
                            f"{limit} chunk-micro-batches per rank")
    tied.sort(key=lambda item: item[0])
    units = [engine.makespan(priced[orders][0], UNIT_COSTS) for _, orders in tied]
    return priced[tied[units.index(min(u for u in units if u is not None))][1]][0]


Made = dict[tuple[int, bool, int], "Key | None"]
"""(phase: 1 measured ratios | 0 unit costs, backward first, cap) -> the greedy's orders;
None where it stalls or provably cannot tie the winner."""
Priced = dict[Key, tuple[ScheduleTable, "float | None"]]
"""Orders -> their table and its makespan at SELECT_COSTS (None: provably past the ceiling
plus _SLACK)."""


def _candidates(engine: _Engine, limit: int) -> tuple[Made, Priced, float | None]:
    """Every candidate's orders (or None), the tables made of those not None, and the
    ceiling: the smallest makespan at SELECT_COSTS among them (rounded), which the winner
    does not exceed.

    Candidates that differ only in cap run the same until a rank holding exactly the
    smaller cap would take a forward: one run per (phase, backward first) at the largest
    cap forks a copy at each such point for the caps that part there, so a shared start is
    scheduled once. The candidate planned about the measured ratios, backward first, at the
    largest cap goes first, unforked, to set the ceiling; every later greedy stops once it
    cannot end by the ceiling (plus _SLACK) and every table's makespan is cut there too."""
    made: Made = {}
    priced: Priced = {}
    ceiling: list[float] = []

    def price(orders: Key | None) -> float | None:
        """Price a finished candidate; the bound the next greedies prune with."""
        if orders is not None and orders not in priced:
            table = engine.table(orders)
            found = engine.makespan(table, SELECT_COSTS,
                                    ceiling[0] + _SLACK if ceiling else None)
            priced[orders] = (table, found)
            if found is not None and (not ceiling or round(found, 6) < ceiling[0]):
                ceiling[:] = [round(found, 6)]
        return ceiling[0] + 1e-6 + _SLACK if ceiling else None

    def forker(phase: int, backward_first: bool) -> Fork:
        def fork(state: _State, parting: range, bound: float | None) -> float | None:
            for cap in reversed(parting):
                orders = engine.run(state.copy(), cap, phase, backward_first, bound, None)
                made[phase, backward_first, cap] = orders
                bound = price(orders)
            return bound
        return fork

    price(engine.run(engine.start(), limit, 1, True, None, None))
    for phase, backward_first in ((1, True), (1, False), (0, True), (0, False)):
        trunk = engine.run(engine.start(), limit, phase, backward_first, price(None),
                           forker(phase, backward_first))
        price(trunk)
        for cap in range(engine.v, limit + 1):  # never parted from the trunk: its orders
            made.setdefault((phase, backward_first, cap), trunk)
    return made, priced, ceiling[0] if ceiling else None


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
    SELECT_COSTS."""
    return _run(_Greedy(pp, m, v), cap, cost, backward_first, bound, None)


Message = tuple[int, int, int, float]
"""(stage, micro-batch, ready time, earliest end of its producer at SELECT_COSTS)."""


def _compute_left(m: int) -> float:
    """A rank's compute in a step at SELECT_COSTS, per stage: m (F + B + W)."""
    work = sum(SELECT_COSTS[op] for op in (Op.FORWARD, Op.BACKWARD_INPUT, Op.WEIGHT))
    return m * work


class _Greedy:
    """The list scheduler's state at one decision: time ``t``, the ranks still to look at
    then (``awake[pos:]``) and all they decide on; ``copy`` forks it."""

    __slots__ = ("acts", "awake", "busy", "early", "events", "forward_end", "grads", "live",
                 "m", "next_data", "next_loss", "orders", "pos", "pp", "remaining", "rest",
                 "t", "v", "weights")

    def __init__(self, pp: int, m: int, v: int) -> None:
        self.pp, self.m, self.v = pp, m, v
        self.t, self.awake, self.pos = 0, list(range(pp)), 0
        # per rank: the messages on its input channels not yet consumed, in send order
        self.acts: list[deque[Message]] = [deque() for _ in range(pp)]
        self.grads: list[deque[Message]] = [deque() for _ in range(pp)]
        self.next_data = 0  # stage 0's next micro-batch
        self.next_loss = 0  # the last stage's next backward
        self.forward_end: dict[int, int] = {}  # last stage: micro-batch -> end of its F
        self.weights: list[deque[tuple[int, int]]] = [deque() for _ in range(pp)]
        self.live, self.busy = [0] * pp, [0] * pp
        self.early = [0.0] * pp  # earliest end of the rank's last op at SELECT_COSTS
        self.rest = [_compute_left(m)] * pp  # its compute still to come, same costs
        self.orders: list[list[ComputeStep]] = [[] for _ in range(pp)]
        self.events: list[tuple[int, int]] = []  # (end, rank) of each busy rank's op
        self.remaining = 3 * pp * v * m

    def copy(self) -> _Greedy:
        other = _Greedy.__new__(_Greedy)
        other.pp, other.m, other.v = self.pp, self.m, self.v
        other.t, other.awake, other.pos = self.t, self.awake[:], self.pos
        other.acts = [deque(q) for q in self.acts]
        other.grads = [deque(q) for q in self.grads]
        other.next_data, other.next_loss = self.next_data, self.next_loss
        other.forward_end = dict(self.forward_end)
        other.weights = [deque(w) for w in self.weights]
        other.live, other.busy = self.live[:], self.busy[:]
        other.early, other.rest = self.early[:], self.rest[:]
        other.orders = [order[:] for order in self.orders]
        other.events = self.events[:]
        other.remaining = self.remaining
        return other


class _State(Protocol):
    """A list-scheduler state that can fork (Python's :class:`_Greedy` or zb_native.c's)."""

    def copy(self) -> _State: ...


Fork = Callable[[_State, range, "float | None"], "float | None"]
"""Called at the state where the caps in ``range`` part from the run (the state is not to
be changed); returns the bound to go on with."""


def _run(g: _Greedy, cap: int, cost: dict[Op, int], backward_first: bool,
         bound: float | None, fork: Fork | None) -> Orders | None:
    """Run the list scheduler from ``g`` to the end: per-rank orders, or None when the cap
    makes it stall, or (with a ``bound``) once the table of these orders provably ends after
    ``bound`` at SELECT_COSTS. With ``fork``, each smaller cap (from v) is handed the state
    where it would first decide otherwise: a rank holding that many takes a forward.

    Event-driven: at each time only the ranks that just finished an op and their two ring
    neighbours (the only ones whose inputs can have changed) look for work; ranks deciding at
    the same time never see each other's new messages (those are ready later), so in any
    order this runs the same decisions as visiting every rank at every time, in a time
    linear in the ops.
    The bound: alongside, each op's earliest end at SELECT_COSTS given its rank's previous op
    and its input's producer; the table's makespan is no less (its waits add to these
    dependencies, never remove one), so a rank whose earliest end plus its compute still to
    come is past ``bound`` proves the candidate cannot tie."""
    pp, m, v = g.pp, g.m, g.v
    last = pp * v - 1
    fwd_op, bwd_op, w_op = Op.FORWARD, Op.BACKWARD_INPUT, Op.WEIGHT
    c_fwd, c_bwd, c_w = cost[fwd_op], cost[bwd_op], cost[w_op]
    s_fwd, s_bwd, s_w = (SELECT_COSTS[fwd_op] / v, SELECT_COSTS[bwd_op] / v,
                         SELECT_COSTS[w_op] / v)
    limit = float("inf") if bound is None else bound
    acts, grads, forward_end, weights = g.acts, g.grads, g.forward_end, g.weights
    live, busy, early, rest, orders, events = g.live, g.busy, g.early, g.rest, g.orders, g.events
    t, awake, pos = g.t, g.awake, g.pos
    next_data, next_loss, remaining = g.next_data, g.next_loss, g.remaining
    loss_rank = last % pp
    parted = v if fork is not None else cap  # the smallest cap not yet handed over
    while True:
        for at in range(pos, len(awake)):
            r = awake[at]
            if busy[r] > t:
                continue
            # the ready B (2: a gradient arrived, 4: the loss's; of two the lower stage, so
            # the loss's last) and the ready F (1: an activation arrived, 3: data; of two the
            # higher stage): 0 where none
            grads_in, acts_in = grads[r], acts[r]
            if grads_in and grads_in[0][2] <= t:
                back = 2
            elif r == loss_rank and forward_end.get(next_loss, t + 1) <= t:
                back = 4
            else:
                back = 0
            if acts_in and acts_in[0][2] <= t:
                fwd = 1
            elif r == 0 and next_data < m:
                fwd = 3
            else:
                fwd = 0
            if fwd:
                held = live[r]
                if held >= cap:
                    fwd = 0
                elif held >= parted and fork is not None and not (back and backward_first):
                    g.t, g.awake, g.pos, g.remaining = t, awake, at, remaining
                    g.next_data, g.next_loss = next_data, next_loss
                    bound = fork(g, range(parted, held + 1), bound)
                    limit = float("inf") if bound is None else bound
                    parted = held + 1
            source = (back or fwd) if backward_first else (fwd or back)
            if source == 1:
                stage, mb, _, ready = acts_in.popleft()
            elif source == 2:
                stage, mb, _, ready = grads_in.popleft()
            elif source == 3:
                stage, mb, ready = 0, next_data, 0.0
                next_data += 1
            elif source == 4:
                stage, mb, ready = last, next_loss, 0.0
                next_loss += 1
            elif weights[r]:
                stage, mb = weights[r].popleft()
            else:
                continue
            if source & 1:  # a forward
                op = fwd_op
                busy[r] = end = t + c_fwd
                done = (early[r] if early[r] > ready else ready) + s_fwd
                rest[r] -= s_fwd
                live[r] += 1
                if stage == last:
                    forward_end[mb] = end
                else:
                    acts[(r + 1) % pp].append((stage + 1, mb, end, done))
            elif source:  # a backward to the input
                op = bwd_op
                busy[r] = end = t + c_bwd
                done = (early[r] if early[r] > ready else ready) + s_bwd
                rest[r] -= s_bwd
                weights[r].append((stage, mb))
                if stage > 0:
                    grads[(r - 1) % pp].append((stage - 1, mb, end, done))
            else:
                op = w_op
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
        awake, pos = [], 0  # a rank twice: the second look finds it busy or finds nothing
        while events and events[0][0] == t:
            r = heappop(events)[1]
            awake += (r, (r + 1) % pp, (r - 1) % pp)
