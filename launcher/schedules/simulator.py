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


_KIND = {Op.SEND_ACT: "act", Op.RECV_ACT: "act", Op.SEND_GRAD: "grad", Op.RECV_GRAD: "grad"}


@dataclass
class _Msg:
    stage: int
    """Stage the payload is for (the receiving stage)."""
    micro_batch: int
    posted: float


@dataclass
class _Rank:
    index: int
    pc: int = 0
    time: float = 0.0
    busy: float = 0.0
    outstanding: list[tuple[tuple[int, int, str], int, bool, Action, int]] = field(
        default_factory=list
    )
    """Posted, unwaited requests: (channel, index on it, is send, action, action index)."""
    held: dict[tuple[int, int], int] = field(default_factory=dict)
    """(stage, slot) -> micro-batch."""
    live: int = 0
    """Micro-batches whose forward ran and whose slot is not yet released."""
    peak: int = 0
    spans: list[tuple[Action, float, float]] = field(default_factory=list)


class _Machine:
    def __init__(self, table: ScheduleTable, costs: Sequence[dict[Op, float]]) -> None:
        self.table = table
        self.costs = costs
        """Per rank: compute cost of each op."""
        self.ranks = [_Rank(r) for r in range(table.pp)]
        self.sends: dict[tuple[int, int, str], list[_Msg]] = {}
        self.recvs: dict[tuple[int, int, str], list[_Msg]] = {}
        self.done: set[tuple[Op, int, int]] = set()
        self.arrived: set[tuple[str, int, int]] = set()

    def fail(self, rank: _Rank, action: Action, why: str) -> ScheduleError:
        t = self.table
        return ScheduleError(
            f"{t.name} pp={t.pp} v={t.virtual_stages} m={t.micro_batches}: rank {rank.index} "
            f"action {rank.pc} {action}: {why}"
        )

    def check_slot(self, rank: _Rank, a: Action, must_hold: bool) -> None:
        if not 0 <= a.slot < self.table.slots_per_stage[a.stage]:
            raise self.fail(rank, a, f"slot {a.slot} out of range")
        holder = rank.held.get((a.stage, a.slot))
        if holder is None and not must_hold:
            rank.held[(a.stage, a.slot)] = a.micro_batch
        elif holder != a.micro_batch:
            raise self.fail(rank, a, f"slot held by micro-batch {holder}")

    def compute(self, rank: _Rank, a: Action) -> None:
        n = self.table.n_stages
        s, mb = a.stage, a.micro_batch
        if self.table.rank_of(s) != rank.index:
            raise self.fail(rank, a, f"stage {s} belongs to rank {self.table.rank_of(s)}")
        if (a.op, s, mb) in self.done:
            raise self.fail(rank, a, "runs twice")
        if a.op is Op.FORWARD:
            if s > 0 and ("act", s, mb) not in self.arrived:
                raise self.fail(rank, a, "input activation has not arrived")
            self.check_slot(rank, a, must_hold=False)
        else:
            self.check_slot(rank, a, must_hold=True)
        if a.op in (Op.BACKWARD, Op.BACKWARD_INPUT):
            if (Op.FORWARD, s, mb) not in self.done:
                raise self.fail(rank, a, "forward has not run")
            if s < n - 1 and ("grad", s, mb) not in self.arrived:
                raise self.fail(rank, a, "output gradient has not arrived")
            other = Op.BACKWARD if a.op is Op.BACKWARD_INPUT else Op.BACKWARD_INPUT
            if (other, s, mb) in self.done:
                raise self.fail(rank, a, "mixes full and split backward")
        if a.op is Op.WEIGHT and (Op.BACKWARD_INPUT, s, mb) not in self.done:
            raise self.fail(rank, a, "input gradient has not run")
        cost = self.costs[rank.index][a.op] / self.table.virtual_stages
        rank.spans.append((a, rank.time, rank.time + cost))
        rank.time += cost
        rank.busy += cost
        self.done.add((a.op, s, mb))
        if a.op is Op.FORWARD:
            rank.live += 1
            rank.peak = max(rank.peak, rank.live)
        if a.op in (Op.BACKWARD, Op.WEIGHT):
            del rank.held[(s, a.slot)]
            rank.live -= 1

    def post(self, rank: _Rank, a: Action) -> None:
        n = self.table.n_stages
        s, mb = a.stage, a.micro_batch
        if self.table.rank_of(s) != rank.index:
            raise self.fail(rank, a, f"stage {s} belongs to rank {self.table.rank_of(s)}")
        kind = _KIND[a.op]
        if a.op is Op.SEND_ACT:
            peer_stage, ready = s + 1, (Op.FORWARD, s, mb) in self.done
        elif a.op is Op.SEND_GRAD:
            peer_stage = s - 1
            ready = {(Op.BACKWARD, s, mb), (Op.BACKWARD_INPUT, s, mb)} & self.done != set()
        elif a.op is Op.RECV_ACT:
            peer_stage, ready = s - 1, True
            self.check_slot(rank, a, must_hold=False)
        else:
            peer_stage, ready = s + 1, True
            self.check_slot(rank, a, must_hold=True)
        if not 0 <= peer_stage < n:
            raise self.fail(rank, a, f"no stage {peer_stage} to talk to")
        if a.peer != self.table.rank_of(peer_stage):
            raise self.fail(rank, a, f"stage {peer_stage} is on rank "
                                     f"{self.table.rank_of(peer_stage)}, not {a.peer}")
        if not ready:
            raise self.fail(rank, a, "sends data that has not been computed")
        is_send = a.op in (Op.SEND_ACT, Op.SEND_GRAD)
        if is_send:
            key = (rank.index, a.peer, kind)
            msg = _Msg(peer_stage, mb, rank.time)
            box = self.sends
        else:
            key = (a.peer, rank.index, kind)
            msg = _Msg(s, mb, rank.time)
            box = self.recvs
        queue = box.setdefault(key, [])
        queue.append(msg)
        rank.outstanding.append((key, len(queue) - 1, is_send, a, rank.pc))

    def wait(self, rank: _Rank, a: Action) -> bool:
        found = [o for o in rank.outstanding if o[3] is self.table.ranks[rank.index][a.peer]
                 and o[4] == a.peer]
        if len(found) != 1:
            raise self.fail(rank, a, f"waits for #{a.peer}, which is not an unwaited request")
        entry = found[0]
        key, index, is_send, posted, _ = entry
        other = (self.recvs if is_send else self.sends).get(key, [])
        if len(other) <= index:
            return False
        send, recv = self.sends[key][index], self.recvs[key][index]
        if (send.stage, send.micro_batch) != (recv.stage, recv.micro_batch):
            raise self.fail(rank, posted, f"channel {key} message {index} carries "
                                          f"stage {send.stage} mb {send.micro_batch}, "
                                          f"receiver expects stage {recv.stage} "
                                          f"mb {recv.micro_batch}")
        if not is_send:
            self.arrived.add((key[2], recv.stage, recv.micro_batch))
        rank.time = max(rank.time, other[index].posted)
        rank.outstanding.remove(entry)
        return True

    def step(self, rank: _Rank) -> bool:
        actions = self.table.ranks[rank.index]
        if rank.pc >= len(actions):
            return False
        a = actions[rank.pc]
        if a.op in COMPUTE_OPS:
            self.compute(rank, a)
        elif a.op is Op.WAIT:
            if not self.wait(rank, a):
                return False
        else:
            self.post(rank, a)
        rank.pc += 1
        return True

    def run(self) -> SimResult:
        while True:
            progressed = False
            for rank in self.ranks:
                while self.step(rank):
                    progressed = True
            if all(r.pc >= len(self.table.ranks[r.index]) for r in self.ranks):
                break
            if not progressed:
                stuck = "; ".join(
                    f"rank {r.index} at {self.table.ranks[r.index][r.pc]}"
                    for r in self.ranks if r.pc < len(self.table.ranks[r.index])
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
                raise ScheduleError(f"{t.name}: channel {key} sends {len(sends)} but "
                                    f"receives {len(self.recvs.get(key, []))}")
        for s in range(t.n_stages):
            for mb in range(t.micro_batches):
                if (Op.FORWARD, s, mb) not in self.done:
                    raise ScheduleError(f"{t.name}: forward of stage {s} mb {mb} never runs")
                full = (Op.BACKWARD, s, mb) in self.done
                split = {(Op.BACKWARD_INPUT, s, mb), (Op.WEIGHT, s, mb)} <= self.done
                if not (full or split):
                    raise ScheduleError(f"{t.name}: backward of stage {s} mb {mb} incomplete")


def simulate(table: ScheduleTable,
             costs: dict[Op, float] | Sequence[dict[Op, float]] | None = None) -> SimResult:
    """Run ``table`` on the abstract machine; raise ScheduleError on any violation.

    Compute costs are per full-model stage chunk; with v chunks per rank each costs 1/v. One
    mapping for every rank, or one per rank (e.g. measured on each GPU: a rank holding more
    layers takes longer, and the others wait for it).
    """
    if costs is None:
        costs = UNIT_COSTS
    per_rank = [costs] * table.pp if isinstance(costs, dict) else list(costs)
    if len(per_rank) != table.pp:
        raise ScheduleError(f"{table.name}: {len(per_rank)} cost tables for pp={table.pp}")
    return _Machine(table, per_rank).run()
