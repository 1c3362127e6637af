"""Per-rank hang watchdog, from process start: a rank that makes no progress aborts itself.

The trainer calls :meth:`Watchdog.beat` at every start-up phase (MPI init, layout, schedule,
communicators, checkpoint load) and at every step and checkpoint phase. A daemon thread
checks the time since the last beat (MPI calls and the native step release the GIL, so the
thread runs while the main thread is blocked on a peer that is gone) and keeps the rank's
proof of life current (:mod:`launcher.train.rank_records`). The limit is
``policy.hang_timeout_s`` in the step loop and ``policy.startup_timeout_s`` (at least the
former) before it. On a timeout it names the ranks that stopped (no sign of life) or fell
behind, and their nodes, from the peers' records; writes them to ``hang.json`` in the
attempt directory; prints one line; records its exit and ``_exit``s with TRAINER_HUNG. The
launcher (srun --kill-on-bad-exit / mpirun) then kills every other rank of the step.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

from launcher.atomic_write import WriteError, write_text
from launcher.job_dir import HANG_FILE
from launcher.job_exit_codes import TRAINER_HUNG
from launcher.train.rank_records import RankRecords, read_ranks, record_exit, stalled_ranks


def _abort(message: str) -> None:
    sys.stderr.write(message + "\n")
    sys.stderr.flush()
    record_exit(TRAINER_HUNG, message)
    os._exit(TRAINER_HUNG)


class Watchdog:
    """Call :meth:`start`, then :meth:`beat` on progress, :meth:`stop` at the end."""

    def __init__(self, timeout_s: float, rank: int,
                 on_hang: Callable[[str], None] = _abort,
                 records: RankRecords | None = None, startup_timeout_s: float = 0.0) -> None:
        self.timeout_s = timeout_s
        self.startup_timeout_s = max(startup_timeout_s, timeout_s) if timeout_s > 0 else 0.0
        self.rank = rank
        self.records = records
        self._on_hang = on_hang
        self._last = time.monotonic()
        self._phase = "start"
        self._starting = True
        self._stopped = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        if (self.timeout_s <= 0 and self.records is None) or self._thread is not None:
            return
        self._last = time.monotonic()
        self._thread = threading.Thread(target=self._run, name="gantry-watchdog", daemon=True)
        self._thread.start()

    def beat(self, phase: str, starting: bool = False) -> None:
        """Progress in ``phase``; ``starting``: still before the step loop."""
        self._phase = phase
        self._starting = starting
        self._last = time.monotonic()
        if self.records is not None:
            self.records.progress(phase)

    def stop(self) -> None:
        self._stopped.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None

    def _limit(self) -> float:
        return self.startup_timeout_s if self._starting else self.timeout_s

    def _run(self) -> None:
        poll = min(0.5, self.timeout_s / 4) if self.timeout_s > 0 else 0.5
        while not self._stopped.wait(poll):
            if self.records is not None:
                self.records.alive()
            limit = self._limit()
            idle = time.monotonic() - self._last
            if limit > 0 and idle > limit:
                knob = ("policy.startup_timeout_s" if self._starting
                        else "policy.hang_timeout_s")
                self._on_hang(
                    f"error: watchdog: rank {self.rank} made no progress for {idle:.1f} s "
                    f"({knob} {limit:g}; stalled in {self._phase}){self._culprits()}; "
                    f"aborting the step (exit {TRAINER_HUNG})")
                return

    def _culprits(self) -> str:
        """The peers that stopped or fell behind, written to hang.json; '' when unknown."""
        if self.records is None:
            return ""
        attempt = self.records.directory.parent
        states = read_ranks(attempt)
        stalled = [r for r in stalled_ranks(states, time.time()) if r != self.rank]
        if not stalled:
            return ""
        nodes = sorted({node for r in stalled if (node := states[r].node)})
        finding = {"noticed_by": self.rank, "time": time.time(), "phase": self._phase,
                   "stalled_ranks": stalled, "stalled_nodes": nodes,
                   "silent": [r for r in stalled if (states[r].beat_time or 0)
                              < time.time() - 3]}
        path = Path(attempt, HANG_FILE)
        try:
            if not path.exists():
                write_text(path, json.dumps(finding) + "\n")
        except (OSError, WriteError):
            pass
        shown = ", ".join(f"rank {r} on {states[r].node or '?'}" for r in stalled[:8])
        more = f" (+{len(stalled) - 8} more)" if len(stalled) > 8 else ""
        return f"; stalled: {shown}{more}"
