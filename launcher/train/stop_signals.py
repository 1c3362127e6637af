"""USR1/TERM handling of the trainer and node evictions: stop at an agreed step boundary.

Slurm sends USR1 ahead of the time limit (``--signal=B:USR1@lead``, forwarded by the batch
script) or on ``scancel --signal=USR1``, and TERM on cancel/preemption; rank 0 also reads
the signal the batch script recorded (``stop-request``), which reaches a step that was
still being created when the script forwarded it. The handler only records the signal
(Python runs it between bytecodes, i.e. after the native step returns). Rank 0 also says
whether a node was asked to leave the job (launcher/recovery/evictions.py). After every
step the ranks agree on both with one all-reduce (element-wise MAX of [signal, eviction], so
TERM wins over USR1 and any rank's eviction counts): on a signal all of them checkpoint the
same step and exit TRAINER_STOPPED; on an eviction alone, TRAINER_EVICTED.
"""

from __future__ import annotations

import signal
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import Any

from launcher.job_dir import STOP_REQUEST_FILE

HANDLED = (signal.SIGUSR1, signal.SIGTERM)


@dataclass(frozen=True)
class Agreed:
    """What every rank acts on after a step."""

    signum: int = 0
    """The strongest stop signal any rank received (0: none)."""
    evict: bool = False
    """A node must leave the job (checkpoint, then exit TRAINER_EVICTED)."""

    def __bool__(self) -> bool:
        return bool(self.signum) or self.evict


class StopRequest:
    """The newest stop signal this rank received (0: none)."""

    def __init__(self) -> None:
        self.signum = 0
        self._previous: dict[int, Any] = {}

    def install(self) -> None:
        for signum in HANDLED:
            self._previous[signum] = signal.signal(signum, self._handle)

    def uninstall(self) -> None:
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)
        self._previous.clear()

    def _handle(self, signum: int, _frame: FrameType | None) -> None:
        self.signum = max(self.signum, signum)

    def note_requested(self, attempt_dir: Path) -> None:
        """Take the signal the batch script recorded in the attempt directory
        (:data:`STOP_REQUEST_FILE`) as received (rank 0, after every step)."""
        try:
            words = (attempt_dir / STOP_REQUEST_FILE).read_text(encoding="utf-8").split()
        except (OSError, ValueError):
            return
        asked = {"USR1": signal.SIGUSR1, "TERM": signal.SIGTERM}.get(words[0] if words else "")
        if asked is not None:
            self.signum = max(self.signum, int(asked))

    def agreed(self, world: Any, evict: bool = False) -> Agreed:
        """Collective (one all-reduce): the signal and eviction every rank acts on; falsy
        when training goes on. ``evict``: this rank (rank 0) saw an eviction request."""
        import numpy as np
        from mpi4py import MPI

        mine = np.array([self.signum, 1 if evict else 0], dtype=np.int64)
        out = np.zeros_like(mine)
        world.Allreduce(mine, out, op=MPI.MAX)
        return Agreed(int(out[0]), bool(out[1]))


def signal_name(signum: int) -> str:
    """"USR1" for SIGUSR1."""
    return signal.Signals(signum).name.removeprefix("SIG")
