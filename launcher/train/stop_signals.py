"""USR1/TERM handling of the trainer: remember the signal, stop at an agreed step boundary.

Slurm sends USR1 ahead of the time limit (``--signal=B:USR1@lead``, forwarded by the batch
script) or on ``scancel --signal=USR1``, and TERM on cancel/preemption. The handler only
records the signal (Python runs it between bytecodes, i.e. after the native step returns);
after every step the ranks agree with one all-reduce (MAX of the signal numbers, so TERM wins
over USR1) and all of them checkpoint the same step and exit with TRAINER_STOPPED.
"""

from __future__ import annotations

import signal
from types import FrameType
from typing import Any

HANDLED = (signal.SIGUSR1, signal.SIGTERM)


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

    def agreed(self, world: Any) -> int:
        """Collective: the signal every rank acts on (0: go on)."""
        from mpi4py import MPI

        return int(world.allreduce(self.signum, op=MPI.MAX))


def signal_name(signum: int) -> str:
    """"USR1" for SIGUSR1."""
    return signal.Signals(signum).name.removeprefix("SIG")
