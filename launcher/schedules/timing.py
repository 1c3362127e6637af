"""The simulator's makespan of a table, computed fast and nothing else: for choosing among
candidate tables that are proven afterwards.

The same abstract machine as :mod:`launcher.schedules.simulator` (each rank runs its rows in
order; a compute adds its cost / v; a ``WAIT`` blocks until the counterpart on the peer is
posted and then moves the clock to that post time, rendezvous with zero latency), the same
float operations in the same order, hence bit-for-bit the same makespan, without the
proof's checks. Sends and receives are paired once up front (the k-th send on a channel
with its k-th receive), so a wait is two list reads. With a ``bound`` the run stops as soon
as some rank cannot end by it (its clock plus its remaining compute is past it).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import cast

from launcher.schedules.table import COMPUTE_OPS, Op, ScheduleError, ScheduleTable

_WAIT = int(Op.WAIT)
_SENDS = frozenset({int(Op.SEND_ACT), int(Op.SEND_GRAD)})
_COMPUTE = frozenset(int(op) for op in COMPUTE_OPS)
_KIND = {int(Op.SEND_ACT): 0, int(Op.RECV_ACT): 0, int(Op.SEND_GRAD): 1, int(Op.RECV_GRAD): 1}
_ChannelEnd = tuple[int, int, int, bool]
"""(source rank, destination rank, kind: 0 activations | 1 gradients, True for the send side)."""


def makespan(table: ScheduleTable, costs: Mapping[Op, float],
             bound: float | None = None) -> float | None:
    """The simulator's makespan of ``table`` at ``costs`` (one mapping for every rank); None
    when ``bound`` is given and some rank provably ends after it. ScheduleError when the
    table blocks for good or a send has no receive (the simulator would say more)."""
    pp, v = table.pp, table.virtual_stages
    cost = {int(op): c / v for op, c in costs.items()}
    ops: list[list[int]] = []
    steps: list[list[float | int]] = []  # per action: its cost (compute) or the WAIT target
    left: list[float] = []  # per rank: compute time not yet run
    channels: dict[_ChannelEnd, list[tuple[int, int]]] = {}
    for r, rows in enumerate(table.rows):
        # numpy's stubs type tolist() by the array's static shape, which a column slice
        # does not keep: the columns are int lists
        op_col = cast(list[int], rows[:, 0].tolist())
        peer_col = cast(list[int], rows[:, 4].tolist())
        ops.append(op_col)
        step: list[float | int] = []
        total = 0.0
        for i, op in enumerate(op_col):
            if op in _COMPUTE:
                step.append(cost[op])
                total += cost[op]
            elif op == _WAIT:
                step.append(peer_col[i])
            else:
                is_send = op in _SENDS
                src, dst = (r, peer_col[i]) if is_send else (peer_col[i], r)
                key: _ChannelEnd = (src, dst, _KIND[op], is_send)
                channels.setdefault(key, []).append((r, i))
                step.append(0)
        steps.append(step)
        left.append(total)
    partner: list[dict[int, tuple[int, int]]] = [{} for _ in range(pp)]
    for (src, dst, kind, is_send), posts in channels.items():
        if not is_send:
            continue
        recvs = channels.get((src, dst, kind, False), [])
        if len(recvs) != len(posts):
            raise ScheduleError(f"{table.name}: channel ({src}, {dst}) sends {len(posts)} "
                                f"but receives {len(recvs)}")
        for (sr, si), (rr, ri) in zip(posts, recvs, strict=True):
            partner[sr][si] = (rr, ri)
            partner[rr][ri] = (sr, si)
    return _run(ops, steps, partner, left, bound, table.name)


def _run(ops: list[list[int]], steps: list[list[float | int]],
         partner: list[dict[int, tuple[int, int]]], left: list[float], bound: float | None,
         name: str) -> float | None:
    pp = len(ops)
    pc = [0] * pp
    clock = [0.0] * pp
    posted: list[dict[int, float]] = [{} for _ in range(pp)]
    limit = float("inf") if bound is None else bound
    while True:
        progressed = False
        for r in range(pp):
            op_col, step, mine, pairs = ops[r], steps[r], posted[r], partner[r]
            i, t, rest, n = pc[r], clock[r], left[r], len(op_col)
            start = i
            while i < n:
                op = op_col[i]
                if op == _WAIT:
                    peer, index = pairs[int(step[i])]
                    if pc[peer] <= index:
                        break
                    t = max(t, posted[peer][index])
                elif op in _COMPUTE:
                    c = step[i]
                    t += c
                    rest -= c
                    if t + rest > limit:
                        return None
                else:
                    mine[i] = t
                i += 1
            if i > start:
                progressed = True
                pc[r], clock[r], left[r] = i, t, rest
        if all(pc[r] >= len(ops[r]) for r in range(pp)):
            return max(clock)
        if not progressed:
            raise ScheduleError(f"{name}: deadlock")
