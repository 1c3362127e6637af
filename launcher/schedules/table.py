"""The schedule table: per-rank action lists that the native executor follows verbatim.

A schedule is first a per-rank *compute order* (F / B / BI / W on (stage, micro-batch));
:func:`build_table` turns it into the full action list by inserting the communication:
non-blocking receives posted ahead of their consumer and waited right before it, and
non-blocking sends posted right after their producer and waited only when their slot is
reused (or at the end of the step), each ``WAIT`` naming the one request it completes.
Activation slots are assigned here too (a slot is taken when its input is received or its
forward runs, and freed after the weight gradient), so the executor takes no decisions.

Stage ``s`` of ``pp * v`` stages lives on rank ``s % pp`` as its local chunk ``s // pp``.
Each action serialises to one int32 row ``(op, stage, micro_batch, slot, peer)``.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from enum import IntEnum

import numpy as np
import numpy.typing as npt


class Op(IntEnum):
    """Action codes shared with ``native/include/gantry/pipeline.h`` (keep in sync)."""

    FORWARD = 1
    BACKWARD = 2
    """Full backward: input and weight gradients."""
    BACKWARD_INPUT = 3
    """Input gradient only (zero-bubble); the weight gradient follows as WEIGHT."""
    WEIGHT = 4
    SEND_ACT = 5
    RECV_ACT = 6
    SEND_GRAD = 7
    RECV_GRAD = 8
    WAIT = 9
    """Complete the one send/recv posted by the action at index ``peer`` of this table."""


COMPUTE_OPS = frozenset({Op.FORWARD, Op.BACKWARD, Op.BACKWARD_INPUT, Op.WEIGHT})
COMM_OPS = frozenset({Op.SEND_ACT, Op.RECV_ACT, Op.SEND_GRAD, Op.RECV_GRAD})
ROW_WIDTH = 5
_MAGIC = b"GSCH"
_VERSION = 1


class ScheduleError(ValueError):
    """A schedule that cannot be built or that the simulator proved wrong."""


@dataclass(frozen=True)
class Action:
    """One step of a rank's table."""

    op: Op
    """What to do."""
    stage: int = -1
    """Global stage index (0 .. pp*v-1); -1 for WAIT."""
    micro_batch: int = -1
    """Micro-batch index (0 .. m-1); -1 for WAIT."""
    slot: int = -1
    """Activation slot of this stage that holds the micro-batch; -1 for WAIT."""
    peer: int = -1
    """Peer rank for send/recv; for WAIT the index (in this rank's table) of the request."""

    def row(self) -> tuple[int, int, int, int, int]:
        return (int(self.op), self.stage, self.micro_batch, self.slot, self.peer)

    def __str__(self) -> str:
        if self.op is Op.WAIT:
            return f"WAIT(#{self.peer})"
        peer = f"->{self.peer}" if self.op in (Op.SEND_ACT, Op.SEND_GRAD) else f"<-{self.peer}"
        tail = peer if self.op in COMM_OPS else ""
        return f"{self.op.name}(s{self.stage},mb{self.micro_batch},slot{self.slot}){tail}"


ComputeStep = tuple[Op, int, int]
"""(op, stage, micro_batch) of a compute order."""


@dataclass(frozen=True)
class ScheduleTable:
    """Per-rank action lists of one optimizer step, plus the shape they were made for."""

    name: str
    """Schedule name (gpipe, 1f1b, interleaved, zb-h1, zb-h2, zb-interleaved)."""
    pp: int
    """Pipeline ranks."""
    virtual_stages: int
    """Chunks (stages) per rank, v."""
    micro_batches: int
    """Micro-batches per step, m."""
    ranks: tuple[tuple[Action, ...], ...]
    """ranks[r]: the actions of pipeline rank r in execution order."""
    slots_per_stage: tuple[int, ...] = field(default=())
    """Activation slots each stage needs (indexed by global stage)."""

    @property
    def n_stages(self) -> int:
        return self.pp * self.virtual_stages

    def rank_of(self, stage: int) -> int:
        return stage % self.pp

    def rank_array(self, rank: int) -> npt.NDArray[np.int32]:
        """The int32 [n_actions, 5] array of one rank (C-contiguous, what C reads)."""
        rows = [a.row() for a in self.ranks[rank]]
        return np.ascontiguousarray(np.array(rows, dtype=np.int32).reshape(-1, ROW_WIDTH))

    def to_bytes(self) -> bytes:
        """Little-endian binary: magic, version, pp, v, m, slots per stage, per-rank rows."""
        header = struct.pack("<4s4i", _MAGIC, _VERSION, self.pp, self.virtual_stages,
                             self.micro_batches)
        parts = [header, np.asarray(self.slots_per_stage, dtype="<i4").tobytes()]
        for rank in range(self.pp):
            arr = self.rank_array(rank).astype("<i4")
            parts.append(struct.pack("<i", arr.shape[0]))
            parts.append(arr.tobytes())
        return b"".join(parts)


def table_from_bytes(data: bytes, name: str = "loaded") -> ScheduleTable:
    """Inverse of :meth:`ScheduleTable.to_bytes` (raises ScheduleError on a bad blob)."""
    head = struct.calcsize("<4s4i")
    if len(data) < head:
        raise ScheduleError("schedule blob is truncated (no header)")
    magic, version, pp, v, m = struct.unpack_from("<4s4i", data, 0)
    if magic != _MAGIC or version != _VERSION:
        raise ScheduleError(f"not a gantry schedule blob (magic {magic!r}, version {version})")
    offset = head
    n_stages = pp * v
    slots = np.frombuffer(data, dtype="<i4", count=n_stages, offset=offset)
    offset += 4 * n_stages
    ranks = []
    for _ in range(pp):
        (count,) = struct.unpack_from("<i", data, offset)
        offset += 4
        rows = np.frombuffer(data, dtype="<i4", count=count * ROW_WIDTH, offset=offset)
        offset += 4 * count * ROW_WIDTH
        ranks.append(tuple(
            Action(Op(int(r[0])), int(r[1]), int(r[2]), int(r[3]), int(r[4]))
            for r in rows.reshape(-1, ROW_WIDTH)
        ))
    if offset != len(data):
        raise ScheduleError(f"schedule blob has {len(data) - offset} trailing bytes")
    return ScheduleTable(name, pp, v, m, tuple(ranks), tuple(int(s) for s in slots))


def _needs(step: ComputeStep, n_stages: int) -> tuple[Op, int] | None:
    """The receive a compute step needs first: (RECV_ACT|RECV_GRAD, peer stage) or None."""
    op, stage, _ = step
    if op is Op.FORWARD and stage > 0:
        return Op.RECV_ACT, stage - 1
    if op in (Op.BACKWARD, Op.BACKWARD_INPUT) and stage < n_stages - 1:
        return Op.RECV_GRAD, stage + 1
    return None


def _produces(step: ComputeStep, n_stages: int) -> tuple[Op, int] | None:
    """The send a compute step ends with: (SEND_ACT|SEND_GRAD, peer stage) or None."""
    op, stage, _ = step
    if op is Op.FORWARD and stage < n_stages - 1:
        return Op.SEND_ACT, stage + 1
    if op in (Op.BACKWARD, Op.BACKWARD_INPUT) and stage > 0:
        return Op.SEND_GRAD, stage - 1
    return None


class _SlotPool:
    """Activation slots of one stage: the lowest free slot is taken first."""

    def __init__(self) -> None:
        self.free: list[int] = []
        self.count = 0
        self.held: dict[int, int] = {}

    def get(self, micro_batch: int) -> tuple[int, bool]:
        """(slot, reused): reused says the slot was held by another micro-batch before."""
        if micro_batch in self.held:
            return self.held[micro_batch], False
        if self.free:
            self.free.sort()
            slot = self.free.pop(0)
            reused = True
        else:
            slot = self.count
            self.count += 1
            reused = False
        self.held[micro_batch] = slot
        return slot, reused

    def release(self, micro_batch: int) -> None:
        self.free.append(self.held.pop(micro_batch))


class _RankBuilder:
    """Emits one rank's actions: posts, targeted WAITs, computes."""

    def __init__(self, pp: int, n_stages: int, pools: list[_SlotPool]) -> None:
        self.pp = pp
        self.n_stages = n_stages
        self.pools = pools
        self.actions: list[Action] = []
        self.pending_sends: dict[tuple[int, int], list[int]] = {}
        """(stage, slot) -> indices of posted, unwaited sends reading that slot."""
        self.posted_recv: dict[tuple[Op, int, int], int] = {}
        """(recv op, stage, mb) -> index of its post."""

    def slot(self, stage: int, mb: int) -> int:
        slot, reused = self.pools[stage].get(mb)
        if reused:
            for index in self.pending_sends.pop((stage, slot), []):
                self.actions.append(Action(Op.WAIT, peer=index))
        return slot

    def post_recv(self, step: ComputeStep, forwards_done: set[tuple[int, int]]) -> None:
        need = _needs(step, self.n_stages)
        if need is None:
            return
        recv_op, peer_stage = need
        _, stage, mb = step
        if (recv_op, stage, mb) in self.posted_recv:
            return
        if recv_op is Op.RECV_GRAD and (stage, mb) not in forwards_done:
            return
        slot = self.slot(stage, mb)
        self.posted_recv[(recv_op, stage, mb)] = len(self.actions)
        self.actions.append(Action(recv_op, stage, mb, slot, peer_stage % self.pp))

    def wait_recv(self, step: ComputeStep) -> None:
        need = _needs(step, self.n_stages)
        if need is not None:
            _, stage, mb = step
            index = self.posted_recv[(need[0], stage, mb)]
            self.actions.append(Action(Op.WAIT, peer=index))

    def compute(self, step: ComputeStep) -> None:
        op, stage, mb = step
        slot = self.slot(stage, mb)
        self.actions.append(Action(op, stage, mb, slot))
        made = _produces(step, self.n_stages)
        if made is not None:
            send_op, peer_stage = made
            self.pending_sends.setdefault((stage, slot), []).append(len(self.actions))
            self.actions.append(Action(send_op, stage, mb, slot, peer_stage % self.pp))
        if op in (Op.BACKWARD, Op.WEIGHT):
            self.pools[stage].release(mb)

    def finish(self) -> tuple[Action, ...]:
        for key in sorted(self.pending_sends):
            for index in self.pending_sends[key]:
                self.actions.append(Action(Op.WAIT, peer=index))
        self.pending_sends.clear()
        return tuple(self.actions)


def build_table(
    name: str, pp: int, v: int, m: int, orders: list[list[ComputeStep]], lookahead: int = 1
) -> ScheduleTable:
    """Insert communication and slots into per-rank compute orders.

    Receives are posted ``lookahead`` computes ahead of their consumer (a gradient only once
    its forward has run) and waited right before it. Sends are posted right after the
    compute that produced their data and waited only before their slot is reused by another
    micro-batch, or at the end of the step: a rank blocks only on data it needs, so any
    compute order that respects the data dependencies runs without deadlock even when every
    send is a rendezvous (the simulator proves it for each table).
    """
    n_stages = pp * v
    if len(orders) != pp:
        raise ScheduleError(f"{name}: {len(orders)} compute orders for pp={pp}")
    pools = [_SlotPool() for _ in range(n_stages)]
    ranks: list[tuple[Action, ...]] = []
    for order in orders:
        builder = _RankBuilder(pp, n_stages, pools)
        forwards_done: set[tuple[int, int]] = set()
        for k, step in enumerate(order):
            for j in range(k, min(k + lookahead + 1, len(order))):
                builder.post_recv(order[j], forwards_done)
            builder.wait_recv(step)
            builder.compute(step)
            if step[0] is Op.FORWARD:
                forwards_done.add((step[1], step[2]))
        ranks.append(builder.finish())
    return ScheduleTable(name, pp, v, m, tuple(ranks), tuple(p.count for p in pools))
