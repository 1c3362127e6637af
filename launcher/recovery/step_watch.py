"""Run the training step and stop waiting for it once a rank has failed.

srun waits for every node of a step before it exits; when a node is gone it waits until
Slurm declares the node dead (SlurmdTimeout: minutes on a real site), although the ranks
that are left already stopped. ``gantry step-watch`` runs the launcher (srun/mpirun) as a
child, forwards USR1/TERM/INT to it, copies its standard error to ours and to
``step.err`` in the attempt directory (the evidence of which task failed first), and
watches the rank records: once a rank recorded a failing exit (or the watchdog its
``hang.json``) and the launcher is still running ``grace_s`` later, it kills the launcher
and returns that rank's exit status, so the batch script can recover at once.
"""

from __future__ import annotations

import contextlib
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from types import FrameType

from launcher.job_dir import HANG_FILE, STEP_ERR_FILE
from launcher.job_exit_codes import TRAINER_HUNG, TRAINER_STOPPED
from launcher.train.rank_records import read_ranks

POLL_S = 0.5
"""How often the records are looked at while the step runs."""
FORWARDED = (signal.SIGUSR1, signal.SIGTERM, signal.SIGINT)


def first_failure(attempt_dir: Path) -> int | None:
    """The exit status of the first rank that failed, TRAINER_HUNG when only the watchdog's
    finding is there, None while no rank failed."""
    ranks = read_ranks(attempt_dir)
    failed = sorted((s for s in ranks.values() if s.exit_code not in (None, 0,
                                                                       TRAINER_STOPPED)),
                    key=lambda s: (s.exit_time or 0.0, s.rank))
    if failed:
        code = failed[0].exit_code
        assert code is not None
        return code
    return TRAINER_HUNG if (attempt_dir / HANG_FILE).exists() else None


def _copy_stderr(source: object, log_path: Path) -> None:
    assert hasattr(source, "readline")
    with open(log_path, "ab") as log:
        for line in iter(source.readline, b""):  # type: ignore[attr-defined]
            sys.stderr.buffer.write(line)
            sys.stderr.buffer.flush()
            log.write(line)
            log.flush()


def watch_step(argv: Sequence[str], attempt_dir: Path, grace_s: float) -> int:
    """Run ``argv``; its exit status, or the failed rank's when it had to be killed."""
    attempt_dir.mkdir(parents=True, exist_ok=True)
    child = subprocess.Popen(list(argv), stderr=subprocess.PIPE)

    def forward(signum: int, _frame: FrameType | None) -> None:
        with contextlib.suppress(ProcessLookupError):
            child.send_signal(signum)

    previous = {s: signal.signal(s, forward) for s in FORWARDED}
    copier = threading.Thread(target=_copy_stderr, args=(child.stderr,
                                                          attempt_dir / STEP_ERR_FILE),
                              daemon=True)
    copier.start()
    failed_at: float | None = None
    failed_code: int | None = None
    try:
        while True:
            try:
                rc = child.wait(timeout=POLL_S)
                break
            except subprocess.TimeoutExpired:
                pass
            if failed_at is None:
                failed_code = first_failure(attempt_dir)
                if failed_code is not None:
                    failed_at = time.monotonic()
            elif time.monotonic() - failed_at > grace_s:
                sys.stderr.write(
                    f"gantry step-watch: a rank failed (exit {failed_code}) and the launcher "
                    f"is still waiting {grace_s:g} s later (a node may be gone): stopping it\n")
                sys.stderr.flush()
                child.kill()
                child.wait()
                rc = failed_code if failed_code is not None else 1
                break
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
        copier.join(timeout=5)
    return rc if rc >= 0 else 128 - rc
