"""The schedule table: per-rank action lists that the native executor follows verbatim.

A schedule is first a per-rank *compute order* (F / B / BI / W on (stage, micro-batch));
:func:`build_table` turns it into the full action list by inserting the communication:
non-blocking receives posted ahead of their consumer and waited right before it, and
non-blocking sends posted right after their producer and waited only when their slot is
reused (or at the end of the step), each ``WAIT`` naming the one request it completes.
Activation slots are assigned here too (a slot is taken when its input is received or its
forward runs, and freed after the weight gradient), so the executor takes no decisions.

Stage ``s`` of ``pp * v`` stages lives on rank ``s % pp`` as its local chunk ``s // pp``.
Each action is one int32 row ``(op, stage, micro_batch, slot, peer)``; a table holds each
rank's rows as one read-only array (what the executor reads and the cache stores) and makes
:class:`Action` objects only when asked (``ranks``), so a table of a million actions is
built in a fraction of a second.
"""

from __future__ import annotations

import heapq
import struct
from collections.abc import Sequence
from dataclasses import dataclass
from enum import IntEnum
from functools import cached_property

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
TABLE_FORMAT_VERSION = 1
"""Version of the blob format (to_bytes); part of the schedule cache key."""
_VERSION = TABLE_FORMAT_VERSION


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


@dataclass(frozen=True, eq=False)
class ScheduleTable:
    """Per-rank action rows of one optimizer step, plus the shape they were made for."""

    name: str
    """Schedule name (gpipe, 1f1b, interleaved, zb-h1, zb-h2, zb-interleaved)."""
    pp: int
    """Pipeline ranks."""
    virtual_stages: int
    """Chunks (stages) per rank, v."""
    micro_batches: int
    """Micro-batches per step, m."""
    rows: tuple[npt.NDArray[np.int32], ...]
    """rows[r]: int32 [n_actions, 5] of pipeline rank r in execution order (read-only)."""
    slots_per_stage: tuple[int, ...] = ()
    """Activation slots each stage needs (indexed by global stage)."""

    @classmethod
    def from_actions(cls, name: str, pp: int, virtual_stages: int, micro_batches: int,
                     ranks: Sequence[Sequence[Action]],
                     slots_per_stage: tuple[int, ...]) -> ScheduleTable:
        """A table from per-rank :class:`Action` lists (tests, hand-made tables)."""
        rows = tuple(_frozen_rows([x for a in actions for x in a.row()]) for actions in ranks)
        return cls(name, pp, virtual_stages, micro_batches, rows, tuple(slots_per_stage))

    @property
    def n_stages(self) -> int:
        return self.pp * self.virtual_stages

    def rank_of(self, stage: int) -> int:
        return stage % self.pp

    @cached_property
    def ranks(self) -> tuple[tuple[Action, ...], ...]:
        """ranks[r]: the actions of pipeline rank r in execution order (made on first use)."""
        return tuple(
            tuple(Action(Op(r[0]), r[1], r[2], r[3], r[4]) for r in rows.tolist())
            for rows in self.rows
        )

    def rank_array(self, rank: int) -> npt.NDArray[np.int32]:
        """The int32 [n_actions, 5] array of one rank (C-contiguous, what C reads)."""
        return self.rows[rank]

    def to_bytes(self) -> bytes:
        """Little-endian binary: magic, version, pp, v, m, slots per stage, per-rank rows."""
        header = struct.pack("<4s4i", _MAGIC, _VERSION, self.pp, self.virtual_stages,
                             self.micro_batches)
        parts = [header, np.asarray(self.slots_per_stage, dtype="<i4").tobytes()]
        for rows in self.rows:
            parts.append(struct.pack("<i", rows.shape[0]))
            parts.append(rows.astype("<i4", copy=False).tobytes())
        return b"".join(parts)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, ScheduleTable):
            return NotImplemented
        return ((self.name, self.pp, self.virtual_stages, self.micro_batches,
                 self.slots_per_stage)
                == (other.name, other.pp, other.virtual_stages, other.micro_batches,
                    other.slots_per_stage)
                and len(self.rows) == len(other.rows)
                and all(np.array_equal(a, b) for a, b in zip(self.rows, other.rows,
                                                               strict=True)))

    __hash__ = None  # type: ignore[assignment]


def _frozen_rows(flat: Sequence[int]) -> npt.NDArray[np.int32]:
    """A read-only C-contiguous int32 [n, 5] array from a flat row-major list."""
    arr = np.array(flat, dtype=np.int32).reshape(-1, ROW_WIDTH)
    arr.setflags(write=False)
    return arr


def table_from_bytes(data: bytes, name: str = "loaded") -> ScheduleTable:
    """Inverse of :meth:`ScheduleTable.to_bytes` (raises ScheduleError on a bad blob: wrong
    magic or version, a size that does not add up, an op code that is no :class:`Op`)."""
    head = struct.calcsize("<4s4i")
    if len(data) < head:
        raise ScheduleError("schedule blob is truncated (no header)")
    magic, version, pp, v, m = struct.unpack_from("<4s4i", data, 0)
    if magic != _MAGIC or version != _VERSION:
        raise ScheduleError(f"not a gantry schedule blob (magic {magic!r}, version {version})")
    if pp < 1 or v < 1 or m < 1 or pp * v * 4 > len(data):
        raise ScheduleError(f"schedule blob header is not a layout (pp {pp}, v {v}, m {m})")
    offset = head
    n_stages = pp * v
    slots = np.frombuffer(data, dtype="<i4", count=n_stages, offset=offset)
    offset += 4 * n_stages
    rows: list[npt.NDArray[np.int32]] = []
    for rank in range(pp):
        if offset + 4 > len(data):
            raise ScheduleError(f"schedule blob is truncated (rank {rank} of {pp})")
        (count,) = struct.unpack_from("<i", data, offset)
        offset += 4
        if count < 0 or offset + 4 * count * ROW_WIDTH > len(data):
            raise ScheduleError(f"schedule blob is truncated (rank {rank}: {count} actions)")
        arr = np.frombuffer(data, dtype="<i4", count=count * ROW_WIDTH, offset=offset)
        offset += 4 * count * ROW_WIDTH
        arr = arr.astype(np.int32).reshape(-1, ROW_WIDTH)
        if arr.size and not np.isin(arr[:, 0], _OP_CODES).all():
            raise ScheduleError(f"schedule blob has an unknown op code (rank {rank})")
        arr.setflags(write=False)
        rows.append(arr)
    if offset != len(data):
        raise ScheduleError(f"schedule blob has {len(data) - offset} trailing bytes")
    return ScheduleTable(name, pp, v, m, tuple(rows), tuple(int(s) for s in slots))


_OP_CODES = np.array([int(op) for op in Op], dtype=np.int32)


def build_table(
    name: str, pp: int, v: int, m: int, orders: Sequence[Sequence[ComputeStep]],
    lookahead: int = 1,
) -> ScheduleTable:
    """Insert communication and slots into per-rank compute orders.

    Receives are posted ``lookahead`` computes ahead of their consumer (a gradient only once
    its forward has run) and waited right before it. Sends are posted right after the
    compute that produced their data and waited only before their slot is reused by another
    micro-batch, or at the end of the step: a rank blocks only on data it needs, so any
    compute order that respects the data dependencies runs without deadlock even when every
    send is a rendezvous (the simulator proves it for each table).

    Slots: each stage takes its lowest free slot when a micro-batch's input is received or
    its forward runs, and frees it after the backward (full) or the weight gradient.
    """
    n_stages = pp * v
    if len(orders) != pp:
        raise ScheduleError(f"{name}: {len(orders)} compute orders for pp={pp}")
    counts = [0] * n_stages
    rows = tuple(_frozen_rows(_rank_rows(pp, n_stages, order, lookahead, counts))
                 for order in orders)
    return ScheduleTable(name, pp, v, m, rows, tuple(counts))


def _rank_rows(pp: int, n_stages: int, order: Sequence[ComputeStep], lookahead: int,
               counts: list[int]) -> list[int]:
    """One rank's actions as a flat row-major int list; ``counts`` gains its stages' slots."""
    last = n_stages - 1
    out: list[int] = []
    emit = out.extend
    held: dict[tuple[int, int], int] = {}  # (stage, mb) -> slot
    free: dict[int, list[int]] = {}  # stage -> heap of free slots
    pending: dict[tuple[int, int], list[int]] = {}  # (stage, slot) -> unwaited send rows
    posted: dict[tuple[int, int, int], int] = {}  # (recv op, stage, mb) -> its row
    forwards_done: set[tuple[int, int]] = set()
    wait, recv_act, recv_grad = int(Op.WAIT), int(Op.RECV_ACT), int(Op.RECV_GRAD)
    fwd, bwd, bwd_in, weight = (int(Op.FORWARD), int(Op.BACKWARD), int(Op.BACKWARD_INPUT),
                                int(Op.WEIGHT))
    send_act, send_grad = int(Op.SEND_ACT), int(Op.SEND_GRAD)

    def slot_of(stage: int, mb: int) -> int:
        slot = held.get((stage, mb))
        if slot is not None:
            return slot
        heap = free.get(stage)
        if heap:
            slot = heapq.heappop(heap)
            for row in pending.pop((stage, slot), ()):
                emit((wait, -1, -1, -1, row))
        else:
            slot = counts[stage]
            counts[stage] += 1
        held[(stage, mb)] = slot
        return slot

    def need(op: int, stage: int) -> int:
        """The receive op the compute needs first (0: none)."""
        if op == fwd:
            return recv_act if stage > 0 else 0
        if op in (bwd, bwd_in):
            return recv_grad if stage < last else 0
        return 0

    n = len(order)
    for k in range(n):
        for j in range(k, min(k + lookahead + 1, n)):
            op, stage, mb = order[j]
            recv = need(op, stage)
            if not recv or (recv, stage, mb) in posted:
                continue
            if recv == recv_grad and (stage, mb) not in forwards_done:
                continue
            slot = slot_of(stage, mb)
            posted[(recv, stage, mb)] = len(out) // ROW_WIDTH
            peer = (stage - 1 if recv == recv_act else stage + 1) % pp
            emit((recv, stage, mb, slot, peer))
        op, stage, mb = order[k]
        recv = need(op, stage)
        if recv:
            emit((wait, -1, -1, -1, posted[(recv, stage, mb)]))
        slot = slot_of(stage, mb)
        emit((int(op), stage, mb, slot, -1))
        send = 0
        if op == fwd:
            send, peer = (send_act, (stage + 1) % pp) if stage < last else (0, 0)
            forwards_done.add((stage, mb))
        elif op in (bwd, bwd_in) and stage > 0:
            send, peer = send_grad, (stage - 1) % pp
        if send:
            pending.setdefault((stage, slot), []).append(len(out) // ROW_WIDTH)
            emit((send, stage, mb, slot, peer))
        if op in (bwd, weight):
            heapq.heappush(free.setdefault(stage, []), held.pop((stage, mb)))
    for key in sorted(pending):
        for row in pending[key]:
            emit((wait, -1, -1, -1, row))
    return out
