"""Proves a schedule table by running it on an abstract machine with blocking p2p.

Each rank executes its actions in order. Compute takes its cost; sends and receives are
posted without blocking and complete only at the ``WAIT`` that names them, which blocks
until the peer has posted the counterpart (rendezvous semantics for sends, zero latency).
Checked on the way: every data dependency (a forward has its input, a backward its output
gradient and its forward, a weight gradient its input gradient), every compute runs
exactly once per (stage, micro-batch) on the rank that owns the stage, sends and receives
on each (src, dst, kind) channel match one to one in order with the same payload, slots
are never clobbered, and the run ends (no deadlock). Reported: makespan, per-rank busy
time, bubble fraction and peak in-flight micro-batches per rank.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from launcher.schedules.table import COMPUTE_OPS, Action, Op, ScheduleError, ScheduleTable

UNIT_COSTS: dict[Op, float] = {
    Op.FORWARD: 1.0, Op.BACKWARD: 2.0, Op.BACKWARD_INPUT: 1.0, Op.WEIGHT: 1.0,
}
"""F = B = W = 1 (a full backward is B + W = 2)."""


def with_unit_defaults(costs: Mapping[Op, float]) -> dict[Op, float]:
    """Measured op costs completed for the simulator: unit costs for ops not given, and a
    full backward not given priced as B + W where both are."""
    full = {**UNIT_COSTS, **costs}
    if Op.BACKWARD not in costs and Op.BACKWARD_INPUT in costs and Op.WEIGHT in costs:
        full[Op.BACKWARD] = costs[Op.BACKWARD_INPUT] + costs[Op.WEIGHT]
    return full


@dataclass
class SimResult:
    """What a schedule costs on the abstract machine."""

    makespan: float
    """Time when the last rank finishes."""
    busy: list[float]
    """Compute time per rank."""
    peak_in_flight: list[int]
    """Most micro-batches with forward done and weight gradient not yet done, per rank
    (activations held; receive buffers posted ahead are counted in slots_per_stage)."""
    spans: list[list[tuple[Action, float, float]]] = field(default_factory=list)
    """Per rank: (action, start, end) of each compute."""

    @property
    def bubble_fraction(self) -> float:
        """Idle share of all ranks' time up to the makespan."""
        total = self.makespan * len(self.busy)
        return 1.0 - sum(self.busy) / total if total else 0.0


_ACT, _GRAD = 0, 1
"""Channel kinds: activations, gradients."""
_KIND_NAME = ("act", "grad")
_FWD, _BWD, _BWD_IN, _WEIGHT = (int(Op.FORWARD), int(Op.BACKWARD), int(Op.BACKWARD_INPUT),
                                int(Op.WEIGHT))
_SEND_ACT, _RECV_ACT, _SEND_GRAD, _RECV_GRAD = (int(Op.SEND_ACT), int(Op.RECV_ACT),
                                                int(Op.SEND_GRAD), int(Op.RECV_GRAD))
_WAIT = int(Op.WAIT)
_COMPUTE = frozenset(int(op) for op in COMPUTE_OPS)

Row = list[int]
"""(op, stage, micro_batch, slot, peer) of one action."""
Channel = tuple[int, int, int]
"""(source rank, destination rank, kind)."""


def _action(row: Row) -> Action:
    return Action(Op(row[0]), row[1], row[2], row[3], row[4])


@dataclass
class _Rank:
    index: int
    rows: list[Row]
    pc: int = 0
    time: float = 0.0
    busy: float = 0.0
    outstanding: dict[int, tuple[Channel, int, bool]] = field(default_factory=dict)
    """Posted, unwaited requests by action index: (channel, index on it, is send)."""
    held: dict[tuple[int, int], int] = field(default_factory=dict)
    """(stage, slot) -> micro-batch."""
    live: int = 0
    """Micro-batches whose forward ran and whose slot is not yet released."""
    peak: int = 0
    spans: list[tuple[Action, float, float]] = field(default_factory=list)


class _Machine:
    def __init__(self, table: ScheduleTable, costs: Sequence[Mapping[Op, float]],
                 record_spans: bool = True) -> None:
        self.table = table
        v = table.virtual_stages
        self.costs = [{int(op): cost / v for op, cost in c.items()} for c in costs]
        """Per rank: compute cost of each op of one chunk."""
        self.record_spans = record_spans
        self.ranks = [_Rank(r, rows.tolist()) for r, rows in enumerate(table.rows)]
        self.sends: dict[Channel, list[tuple[int, int, float]]] = {}
        """Per channel, in order: (receiving stage, micro-batch, time posted)."""
        self.recvs: dict[Channel, list[tuple[int, int, float]]] = {}
        self.done: set[tuple[int, int, int]] = set()
        self.arrived: set[tuple[int, int, int]] = set()

    def fail(self, rank: _Rank, row: Row, why: str) -> ScheduleError:
        t = self.table
        return ScheduleError(
            f"{t.name} pp={t.pp} v={t.virtual_stages} m={t.micro_batches}: rank {rank.index} "
            f"action {rank.pc} {_action(row)}: {why}"
        )

    def check_slot(self, rank: _Rank, row: Row, must_hold: bool) -> None:
        stage, mb, slot = row[1], row[2], row[3]
        if not (0 <= stage < self.table.n_stages
                and 0 <= slot < self.table.slots_per_stage[stage]):
            raise self.fail(rank, row, f"slot {slot} out of range")
        holder = rank.held.get((stage, slot))
        if holder is None and not must_hold:
            rank.held[(stage, slot)] = mb
        elif holder != mb:
            raise self.fail(rank, row, f"slot held by micro-batch {holder}")

    def compute(self, rank: _Rank, row: Row) -> None:
        n = self.table.n_stages
        op, s, mb = row[0], row[1], row[2]
        if self.table.rank_of(s) != rank.index:
            raise self.fail(rank, row, f"stage {s} belongs to rank {self.table.rank_of(s)}")
        done = self.done
        if (op, s, mb) in done:
            raise self.fail(rank, row, "runs twice")
        if op == _FWD:
            if s > 0 and (_ACT, s, mb) not in self.arrived:
                raise self.fail(rank, row, "input activation has not arrived")
            self.check_slot(rank, row, must_hold=False)
        else:
            self.check_slot(rank, row, must_hold=True)
        if op in (_BWD, _BWD_IN):
            if (_FWD, s, mb) not in done:
                raise self.fail(rank, row, "forward has not run")
            if s < n - 1 and (_GRAD, s, mb) not in self.arrived:
                raise self.fail(rank, row, "output gradient has not arrived")
            other = _BWD if op == _BWD_IN else _BWD_IN
            if (other, s, mb) in done:
                raise self.fail(rank, row, "mixes full and split backward")
        if op == _WEIGHT and (_BWD_IN, s, mb) not in done:
            raise self.fail(rank, row, "input gradient has not run")
        cost = self.costs[rank.index][op]
        if self.record_spans:
            rank.spans.append((_action(row), rank.time, rank.time + cost))
        rank.time += cost
        rank.busy += cost
        done.add((op, s, mb))
        if op == _FWD:
            rank.live += 1
            rank.peak = max(rank.peak, rank.live)
        if op in (_BWD, _WEIGHT):
            del rank.held[(s, row[3])]
            rank.live -= 1

    def post(self, rank: _Rank, row: Row) -> None:
        n = self.table.n_stages
        op, s, mb, peer = row[0], row[1], row[2], row[4]
        if self.table.rank_of(s) != rank.index:
            raise self.fail(rank, row, f"stage {s} belongs to rank {self.table.rank_of(s)}")
        if op == _SEND_ACT:
            kind, peer_stage, ready = _ACT, s + 1, (_FWD, s, mb) in self.done
        elif op == _SEND_GRAD:
            kind, peer_stage = _GRAD, s - 1
            ready = (_BWD, s, mb) in self.done or (_BWD_IN, s, mb) in self.done
        elif op == _RECV_ACT:
            kind, peer_stage, ready = _ACT, s - 1, True
            self.check_slot(rank, row, must_hold=False)
        elif op == _RECV_GRAD:
            kind, peer_stage, ready = _GRAD, s + 1, True
            self.check_slot(rank, row, must_hold=True)
        else:
            raise self.fail(rank, row, f"op {op} is not an action")
        if not 0 <= peer_stage < n:
            raise self.fail(rank, row, f"no stage {peer_stage} to talk to")
        if peer != self.table.rank_of(peer_stage):
            raise self.fail(rank, row, f"stage {peer_stage} is on rank "
                                       f"{self.table.rank_of(peer_stage)}, not {peer}")
        if not ready:
            raise self.fail(rank, row, "sends data that has not been computed")
        is_send = op in (_SEND_ACT, _SEND_GRAD)
        if is_send:
            key = (rank.index, peer, kind)
            msg = (peer_stage, mb, rank.time)
            box = self.sends
        else:
            key = (peer, rank.index, kind)
            msg = (s, mb, rank.time)
            box = self.recvs
        queue = box.setdefault(key, [])
        queue.append(msg)
        rank.outstanding[rank.pc] = (key, len(queue) - 1, is_send)

    def wait(self, rank: _Rank, row: Row) -> bool:
        target = row[4]
        entry = rank.outstanding.get(target)
        if entry is None:
            raise self.fail(rank, row, f"waits for #{target}, which is not an unwaited request")
        key, index, is_send = entry
        other = (self.recvs if is_send else self.sends).get(key, [])
        if len(other) <= index:
            return False
        send, recv = self.sends[key][index], self.recvs[key][index]
        if send[:2] != recv[:2]:
            posted = rank.rows[target]
            raise ScheduleError(
                f"{self.table.name} pp={self.table.pp} v={self.table.virtual_stages} "
                f"m={self.table.micro_batches}: rank {rank.index} action {rank.pc} "
                f"{_action(posted)}: channel {(key[0], key[1], _KIND_NAME[key[2]])} message "
                f"{index} carries stage {send[0]} mb {send[1]}, receiver expects stage "
                f"{recv[0]} mb {recv[1]}")
        if not is_send:
            self.arrived.add((key[2], recv[0], recv[1]))
        rank.time = max(rank.time, other[index][2])
        del rank.outstanding[target]
        return True

    def advance(self, rank: _Rank) -> bool:
        """Run rank's actions until it blocks or ends; True if it ran any."""
        rows, start = rank.rows, rank.pc
        while rank.pc < len(rows):
            row = rows[rank.pc]
            op = row[0]
            if op in _COMPUTE:
                self.compute(rank, row)
            elif op == _WAIT:
                if not self.wait(rank, row):
                    break
            else:
                self.post(rank, row)
            rank.pc += 1
        return rank.pc > start

    def run(self) -> SimResult:
        while True:
            progressed = False
            for rank in self.ranks:
                progressed = self.advance(rank) or progressed
            if all(r.pc >= len(r.rows) for r in self.ranks):
                break
            if not progressed:
                stuck = "; ".join(
                    f"rank {r.index} at {_action(r.rows[r.pc])}"
                    for r in self.ranks if r.pc < len(r.rows)
                )
                raise ScheduleError(f"{self.table.name}: deadlock ({stuck})")
        self.finish()
        return SimResult(
            makespan=max(r.time for r in self.ranks),
            busy=[r.busy for r in self.ranks],
            peak_in_flight=[r.peak for r in self.ranks],
            spans=[r.spans for r in self.ranks],
        )

    def finish(self) -> None:
        t = self.table
        for rank in self.ranks:
            if rank.outstanding:
                raise ScheduleError(f"{t.name}: rank {rank.index} ends with unwaited comms")
            if rank.held:
                raise ScheduleError(f"{t.name}: rank {rank.index} ends holding slots "
                                    f"{sorted(rank.held)}")
        for key, sends in self.sends.items():
            if len(sends) != len(self.recvs.get(key, [])):
                name = (key[0], key[1], _KIND_NAME[key[2]])
                raise ScheduleError(f"{t.name}: channel {name} sends {len(sends)} but "
                                    f"receives {len(self.recvs.get(key, []))}")
        for s in range(t.n_stages):
            for mb in range(t.micro_batches):
                if (_FWD, s, mb) not in self.done:
                    raise ScheduleError(f"{t.name}: forward of stage {s} mb {mb} never runs")
                full = (_BWD, s, mb) in self.done
                split = (_BWD_IN, s, mb) in self.done and (_WEIGHT, s, mb) in self.done
                if not (full or split):
                    raise ScheduleError(f"{t.name}: backward of stage {s} mb {mb} incomplete")


def simulate(table: ScheduleTable,
             costs: dict[Op, float] | Sequence[dict[Op, float]] | None = None,
             spans: bool = True) -> SimResult:
    """Run ``table`` on the abstract machine; raise ScheduleError on any violation.

    Compute costs are per full-model stage chunk; with v chunks per rank each costs 1/v. One
    mapping for every rank, or one per rank (e.g. measured on each GPU: a rank holding more
    layers takes longer, and the others wait for it). ``spans=False`` leaves
    :attr:`SimResult.spans` empty (the proof and the numbers are the same, made faster).
    """
    if costs is None:
        costs = UNIT_COSTS
    per_rank = [costs] * table.pp if isinstance(costs, dict) else list(costs)
    if len(per_rank) != table.pp:
        raise ScheduleError(f"{table.name}: {len(per_rank)} cost tables for pp={table.pp}")
    return _Machine(table, per_rank, spans).run()
