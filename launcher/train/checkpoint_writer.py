"""Collective checkpoint saving, synchronous or in the background (off the critical path).

Every call is collective (all ranks call it in the same order), so the ranks agree on when a
checkpoint is complete:

- :meth:`CheckpointWriter.save` copies this rank's stage buffers (replica 0 only: replicas
  hold identical state), then writes the shards now (sync) or in a background thread
  (async; the copies make the next steps safe to run meanwhile). Only one save is in flight:
  a new save first completes the previous one.
- :meth:`CheckpointWriter.poll` (after every step): completes the pending save, so a write
  overlaps exactly one step and checkpoint N is complete by the end of step N + 1.
- :meth:`CheckpointWriter.wait` blocks until the pending save is complete (before a stop or
  at the end of training).

Completing = agree on errors (a failed write fails every rank), gather (name, sha256) of all
shards to rank 0, rank 0 writes the manifest (the completeness marker) and prunes to keep K,
barrier. A crash before the manifest leaves the previous checkpoint the newest complete one.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from launcher.errors import GantryError
from launcher.train import checkpoint
from launcher.train.native_pipeline import Chunk

Agree = Callable[[Any, GantryError | None], None]


class _Pending:
    """One save in flight on this rank."""

    def __init__(self, step: int) -> None:
        self.step = step
        self.files: dict[str, str] = {}
        self.error: GantryError | None = None
        self.thread: threading.Thread | None = None


class CheckpointWriter:
    """Saves checkpoints of this rank's chunks under ``root``; see the module docstring."""

    def __init__(self, world: Any, agree: Agree, root: Path, *, keep: int, seed: int,
                 writes: bool, background: bool) -> None:
        self.world = world
        self.agree = agree
        self.root = root
        self.keep = keep
        self.seed = seed
        self.writes = writes
        """True on the ranks that write shards (replica 0)."""
        self.background = background
        self.rank = int(world.Get_rank())
        self._pending: _Pending | None = None
        self.completed: list[int] = []
        """Steps whose manifest was written, in order."""

    @property
    def pending_step(self) -> int | None:
        return None if self._pending is None else self._pending.step

    def save(self, step: int, chunks: Sequence[Chunk]) -> None:
        """Collective: start saving the state after ``step`` steps."""
        self.wait()
        pending = _Pending(step)
        snapshots = [(c.stage, checkpoint.snapshot_chunk(c)) for c in chunks] if self.writes \
            else []
        if self.background and snapshots:
            pending.thread = threading.Thread(target=self._write, args=(pending, snapshots),
                                              name=f"gantry-ckpt-{step}", daemon=True)
            pending.thread.start()
        else:
            self._write(pending, snapshots)
        self._pending = pending
        if not self.background:
            self.wait()

    def _write(self, pending: _Pending,
               snapshots: list[tuple[int, checkpoint.Snapshot]]) -> None:
        try:
            for stage, tensors in snapshots:
                name, digest = checkpoint.write_shard(self.root, pending.step, stage, tensors,
                                                      self.seed, self.rank)
                pending.files[name] = digest
        except (GantryError, OSError, ValueError) as err:
            pending.error = GantryError(f"checkpoint at step {pending.step}: {err}")

    def poll(self) -> None:
        """Collective, after the step that followed a save: complete that save (its write
        overlapped the step). Bounding the lag to one step makes checkpoint N durable by the
        end of step N + 1, whatever happens later."""
        self.wait()

    def wait(self) -> None:
        """Collective: block until the pending save (if any) is complete."""
        pending, self._pending = self._pending, None
        if pending is None:
            return
        if pending.thread is not None:
            pending.thread.join()
        self.agree(self.world, pending.error)
        gathered = self.world.gather(pending.files, root=0)
        if self.rank == 0:
            merged = {k: v for part in gathered for k, v in part.items()}
            checkpoint.write_manifest(self.root, pending.step, merged, self.keep)
        self.world.barrier()
        self.completed.append(pending.step)
