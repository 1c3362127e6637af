"""Per-rank hang watchdog: a rank that makes no progress for ``timeout_s`` aborts itself.

The training loop calls :meth:`Watchdog.beat` at every step and checkpoint phase. A daemon
thread checks the time since the last beat (MPI calls and the native step release the GIL,
so the thread runs while the main thread is blocked on a peer that is gone). On a timeout it
prints one line naming the rank, the stalled phase and the time, and ``_exit``s with
TRAINER_HUNG: the launcher (srun --kill-on-bad-exit / mpirun) then kills every other rank
of the step, and the batch script requeues the job to resume from the last checkpoint.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Callable

from launcher.job_exit_codes import TRAINER_HUNG


def _abort(message: str) -> None:
    sys.stderr.write(message + "\n")
    sys.stderr.flush()
    os._exit(TRAINER_HUNG)


class Watchdog:
    """Call :meth:`start`, then :meth:`beat` on progress, :meth:`stop` at the end."""

    def __init__(self, timeout_s: float, rank: int,
                 on_hang: Callable[[str], None] = _abort) -> None:
        self.timeout_s = timeout_s
        self.rank = rank
        self._on_hang = on_hang
        self._last = time.monotonic()
        self._phase = "start"
        self._stopped = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        if self.timeout_s <= 0 or self._thread is not None:
            return
        self._last = time.monotonic()
        self._thread = threading.Thread(target=self._run, name="gantry-watchdog", daemon=True)
        self._thread.start()

    def beat(self, phase: str) -> None:
        self._phase = phase
        self._last = time.monotonic()

    def stop(self) -> None:
        self._stopped.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None

    def _run(self) -> None:
        poll = min(1.0, self.timeout_s / 4)
        while not self._stopped.wait(poll):
            idle = time.monotonic() - self._last
            if idle > self.timeout_s:
                self._on_hang(
                    f"error: watchdog: rank {self.rank} made no progress for {idle:.1f} s "
                    f"(policy.hang_timeout_s {self.timeout_s:g}; stalled in {self._phase}); "
                    f"aborting the step (exit {TRAINER_HUNG})")
                return
