"""Collective checkpoint saving, synchronous or in the background (off the critical path).

Every call is collective (all ranks call it in the same order), so the ranks agree on when a
checkpoint is complete:

- :meth:`CheckpointWriter.save` copies this rank's stage buffers (replica 0 only: replicas
  hold identical state) into its reusable, page-locked staging arrays (host_staging.py),
  then writes the shards now (sync) or in a background thread
  (async; the copies make the next steps safe to run meanwhile). Only one save is in flight:
  a new save first completes the previous one.
- :meth:`CheckpointWriter.poll` (after every step): completes the pending save once every
  rank's write is done (a one-int allgather while a save is pending), and at the latest once
  it is ``max_lag`` steps old: checkpoint N is complete by the end of step N + max_lag
  (``checkpoint.max_lag_steps``, default 1: the write overlaps one step).
- :meth:`CheckpointWriter.wait` blocks until the pending save is complete (before a stop or
  at the end of training).

Completing = agree on errors (a failed write fails every rank), gather (name, checksum) of all
shards and each rank's WriteTiming to rank 0, rank 0 writes the manifest (the completeness
marker) and prunes to keep K, barrier. A crash before the manifest leaves the previous
checkpoint the newest complete one. :meth:`CheckpointWriter.close` (not collective: also on
the way out of an error) unpins the staging arrays.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from launcher.errors import GantryError
from launcher.train import checkpoint
from launcher.train.checkpoint import WriteTiming
from launcher.train.host_staging import HostStaging
from launcher.train.native_pipeline import Chunk

Agree = Callable[[Any, GantryError | None], None]
Completed = Callable[[int, int, list[WriteTiming]], None]
"""Called on rank 0 with (checkpoint step, step after which it completed, the writing ranks'
timings) once its manifest is written."""


class _Pending:
    """One save in flight on this rank."""

    def __init__(self, step: int) -> None:
        self.step = step
        self.files: dict[str, str] = {}
        self.timing = WriteTiming()
        self.error: GantryError | None = None
        self.thread: threading.Thread | None = None


class CheckpointWriter:
    """Saves checkpoints of this rank's chunks under ``root``; see the module docstring."""

    def __init__(self, world: Any, agree: Agree, root: Path, *, keep: int, seed: int,
                 writes: bool, background: bool, max_lag: int = 1,
                 on_complete: Completed | None = None, pinned_staging: bool = True) -> None:
        if max_lag < 1:
            raise ValueError(f"max_lag {max_lag} is not allowed (expected >= 1)")
        self.world = world
        self.agree = agree
        self.root = root
        self.keep = keep
        self.seed = seed
        self.writes = writes
        """True on the ranks that write shards (replica 0)."""
        self.background = background
        self.rank = int(world.Get_rank())
        self.max_lag = max_lag
        """Steps a background write may overlap before the loop waits for it."""
        self.on_complete = on_complete
        self._pending: _Pending | None = None
        self._staging = HostStaging() if pinned_staging else None
        self._now = 0
        """The step the loop last reported (save / poll)."""
        self.completed: list[int] = []
        """Steps whose manifest was written, in order."""

    @property
    def pending_step(self) -> int | None:
        return None if self._pending is None else self._pending.step

    def save(self, step: int, chunks: Sequence[Chunk]) -> None:
        """Collective: start saving the state after ``step`` steps."""
        self._now = step
        self.wait()
        pending = _Pending(step)
        t_copy = time.perf_counter()
        snapshots = [(c.stage, checkpoint.snapshot_chunk(c, self._staging)) for c in chunks] \
            if self.writes else []
        pending.timing.copy_s = time.perf_counter() - t_copy
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
                                                      self.seed, self.rank, pending.timing)
                pending.files[name] = digest
        except Exception as err:  # any failure (e.g. no thread to hash with) must reach agree
            pending.error = GantryError(f"checkpoint at step {pending.step}: {err}")

    def poll(self, step: int) -> None:
        """Collective, after a step (``step`` steps done) that saved nothing: complete the
        pending save if every rank's write is done, or, done or not, once it is ``max_lag``
        steps old. Bounding the lag makes checkpoint N durable by the end of step
        N + max_lag, whatever happens later."""
        self._now = step
        pending = self._pending
        if pending is None:
            return
        if step - pending.step < self.max_lag:
            done = pending.thread is None or not pending.thread.is_alive()
            if not min(self.world.allgather(int(done))):
                return
        self.wait()

    def wait(self) -> None:
        """Collective: block until the pending save (if any) is complete."""
        pending, self._pending = self._pending, None
        if pending is None:
            return
        if pending.thread is not None:
            pending.thread.join()
        self.agree(self.world, pending.error)
        gathered = self.world.gather((pending.files, pending.timing), root=0)
        if self.rank == 0:
            merged = {k: v for files, _ in gathered for k, v in files.items()}
            checkpoint.write_manifest(self.root, pending.step, merged, self.keep)
            if self.on_complete is not None:
                self.on_complete(pending.step, max(self._now, pending.step),
                                 [timing for files, timing in gathered if files])
        self.world.barrier()
        self.completed.append(pending.step)

    @property
    def unpinned(self) -> str | None:
        """Why the staging arrays are not page-locked (None when they are, none exist yet, or
        staging is off)."""
        return None if self._staging is None else self._staging.unpinned

    def close(self) -> str | None:
        """Unpins the staging arrays (a write still running keeps its views of them valid);
        returns why an unpin failed, if one did (never raises: it runs on error paths too)."""
        if self._staging is None:
            return None
        self._staging.close()
        return self._staging.close_error
