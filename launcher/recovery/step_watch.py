"""Run the training step and stop waiting for it once a rank has failed.

srun waits for every node of a step before it exits; when a node is gone it waits until
Slurm declares the node dead (SlurmdTimeout: minutes on a real site), although the ranks
that are left already stopped. ``gantry step-watch`` runs the launcher (srun/mpirun) as a
child, forwards USR1/TERM/INT to it, copies its standard error to ours and to
``step.err`` in the attempt directory (the evidence of which task failed first), and
watches the rank records: once a rank recorded a failing exit (or the watchdog its
``hang.json``) and the launcher is still running ``grace_s`` later, it kills the launcher
and returns that rank's exit status, so the batch script can recover at once.

A command job's program cannot act on an eviction (launcher/recovery/evictions.py) the way
gantry's trainer does (checkpoint, then exit TRAINER_EVICTED), so for command jobs the
script passes ``stop_on_eviction``: once a node was asked to leave the job, step-watch
has the ranks sent TERM (mpirun passes the launcher's TERM on to them; srun would answer it
by killing its tasks at once, Slurm's "forcing job termination", so under srun the TERM goes
to the job's steps through ``scancel --signal=TERM``), kills the launcher when it is still
there ``stop_grace_s`` later, and returns TRAINER_EVICTED whatever the launcher's own
status; a launcher that fails by itself while an eviction is pending (the program crashed
on the GPU the monitor saw go) returns TRAINER_EVICTED too. Either way ``gantry recover``
then finds the eviction, drains the node and relaunches the command on a spare. Without
the flag (gantry's trainer, which checkpoints first) evictions are not looked at here.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from types import FrameType

from launcher.errors import UserInputError
from launcher.job_dir import HANG_FILE, STEP_ERR_FILE
from launcher.job_exit_codes import (
    TRAINER_BAD_INPUT,
    TRAINER_EVICTED,
    TRAINER_FAULT_INJECTED,
    TRAINER_HUNG,
    TRAINER_STOPPED,
)
from launcher.recovery.evictions import Eviction, pending_evictions
from launcher.slurm.tools import is_srun
from launcher.train.rank_records import read_ranks

POLL_S = 0.5
"""How often the records are looked at while the step runs."""
FORWARDED = (signal.SIGUSR1, signal.SIGTERM, signal.SIGINT)
SRUN_END_S = 10.0
"""How long srun has to have Slurm kill its step's tasks before it is killed itself."""
STOP_GRACE_S = 30.0
"""Seconds a command job's launcher has after TERM on an eviction before it is killed (as
Slurm's KillWait: a rank that mpirun passed the TERM to may checkpoint first)."""


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
    """Pass the launcher's stderr on and keep a copy; a copy that cannot be written (a full
    disk) stops the copy, never the draining (a full pipe would block srun)."""
    assert hasattr(source, "readline")
    log = None
    try:
        log = open(log_path, "ab")  # noqa: SIM115 (closed below, kept while lines come)
    except OSError as err:
        sys.stderr.write(f"gantry step-watch: cannot keep {log_path} ({err.strerror})\n")
    for line in iter(source.readline, b""):  # type: ignore[attr-defined]
        with contextlib.suppress(OSError):
            sys.stderr.buffer.write(line)
            sys.stderr.buffer.flush()
        if log is not None:
            try:
                log.write(line)
                log.flush()
            except OSError:
                with contextlib.suppress(OSError):
                    log.close()
                log = None
    if log is not None:
        with contextlib.suppress(OSError):
            log.close()


def killed_status(failed_code: int | None) -> int:
    """The step's status when step-watch had to kill the launcher after a rank failed: the
    rank's own status when it is bad input (2, final) or a recoverable one (hang, injected
    fault, eviction, a signal); else that of a killed task (128 + SIGKILL), since the launcher was
    waiting for a rank it could no longer reach."""
    if failed_code is not None and (failed_code in (TRAINER_BAD_INPUT, TRAINER_HUNG,
                                                    TRAINER_FAULT_INJECTED, TRAINER_EVICTED)
                                    or failed_code >= 128):
        return failed_code
    return 128 + signal.SIGKILL


def watch_step(argv: Sequence[str], attempt_dir: Path, grace_s: float, *,
               stop_on_eviction: bool = False, stop_grace_s: float = STOP_GRACE_S) -> int:
    """Run ``argv``; its exit status, or :func:`killed_status` when it had to be killed, or
    TRAINER_EVICTED when ``stop_on_eviction`` and a node was asked to leave the job (see
    the module docstring)."""
    pending: list[int] = []
    box: dict[str, subprocess.Popen[bytes]] = {}

    def forward(signum: int, _frame: FrameType | None) -> None:
        child = box.get("child")
        if child is None:
            pending.append(signum)  # before the launcher exists: sent once it does
            return
        with contextlib.suppress(ProcessLookupError):
            child.send_signal(signum)

    previous = {s: signal.signal(s, forward) for s in FORWARDED}
    try:
        return _watch(argv, attempt_dir, grace_s, box, pending,
                      stop_grace_s if stop_on_eviction else None)
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)


def _term_ranks(argv: Sequence[str], child: subprocess.Popen[bytes]) -> None:
    """TERM to the ranks of the step ``argv`` launched: through Slurm when the launcher is
    srun inside a job (srun itself would SIGKILL them on a TERM), else to the launcher."""
    job_id = os.environ.get("SLURM_JOB_ID", "")
    if is_srun(argv[0]) and job_id.isdigit():
        from launcher.slurm.runner import SlurmCommandError, signal_job_steps

        try:
            signal_job_steps(job_id, "TERM")
            return
        except SlurmCommandError as err:
            _say(f"TERM to the steps of job {job_id} failed ({err}): TERM to the launcher")
    with contextlib.suppress(ProcessLookupError):
        child.send_signal(signal.SIGTERM)


def _end_launcher(argv: Sequence[str], child: subprocess.Popen[bytes]) -> None:
    """End a launcher whose ranks outlived their TERM. srun is sent TERM itself first: it
    then has Slurm kill the step's tasks on every node, where a SIGKILLed srun would leave
    them running (holding their GPUs) beside the relaunch; KILL after SRUN_END_S."""
    if is_srun(argv[0]):
        with contextlib.suppress(ProcessLookupError):
            child.send_signal(signal.SIGTERM)
        try:
            child.wait(timeout=SRUN_END_S)
            return
        except subprocess.TimeoutExpired:
            pass
    child.kill()
    child.wait()


def _say(text: str) -> None:
    sys.stderr.write(f"gantry step-watch: {text}\n")
    sys.stderr.flush()


def _asked(evictions: Sequence[Eviction]) -> str:
    return "; ".join(f"{e.node} by the {e.source} check ({e.reason})" for e in evictions)


def _watch(argv: Sequence[str], attempt_dir: Path, grace_s: float,
           box: dict[str, subprocess.Popen[bytes]], pending: list[int],
           stop_grace_s: float | None) -> int:
    """``stop_grace_s``: None, evictions are not looked at; else the seconds between the TERM
    and the KILL of a launcher stopped on an eviction."""
    try:
        attempt_dir.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise UserInputError(f"--attempt-dir {attempt_dir}: cannot create it "
                             f"({err.strerror})") from None
    try:
        child = subprocess.Popen(list(argv), stderr=subprocess.PIPE)
    except OSError as err:
        raise UserInputError(f"step-watch: cannot run {argv[0]!r} ({err.strerror})") from None
    box["child"] = child
    for signum in pending:
        with contextlib.suppress(ProcessLookupError):
            child.send_signal(signum)
    copier = threading.Thread(target=_copy_stderr, args=(child.stderr,
                                                          attempt_dir / STEP_ERR_FILE),
                              daemon=True)
    copier.start()
    failed_at: float | None = None
    failed_code: int | None = None
    stopped_at: float | None = None
    try:
        while True:
            try:
                rc = child.wait(timeout=POLL_S)
                break
            except subprocess.TimeoutExpired:
                pass
            if stopped_at is not None:
                assert stop_grace_s is not None
                if time.monotonic() - stopped_at > stop_grace_s:
                    _say(f"the launcher is still running {stop_grace_s:g} s after TERM: "
                         "killing it")
                    _end_launcher(argv, child)
                    rc = TRAINER_EVICTED
                    break
                continue
            if stop_grace_s is not None and (asked := pending_evictions(attempt_dir)):
                _say(f"a node was asked to leave the job ({_asked(asked)}): stopping the "
                     f"step (TERM, KILL after {stop_grace_s:g} s)")
                _term_ranks(argv, child)
                stopped_at = time.monotonic()
                continue
            if failed_at is None:
                failed_code = first_failure(attempt_dir)
                if failed_code is not None:
                    failed_at = time.monotonic()
            elif time.monotonic() - failed_at > grace_s:
                _say(f"a rank failed (exit {failed_code}) and the launcher is still waiting "
                     f"{grace_s:g} s later (a node may be gone): stopping it")
                child.kill()
                child.wait()
                rc = killed_status(failed_code)
                break
    finally:
        copier.join(timeout=5)
    rc = rc if rc >= 0 else 128 - rc
    if stopped_at is not None:
        return TRAINER_EVICTED  # stopped by us: not finished, whatever the launcher said
    if stop_grace_s is not None and rc != 0 and (asked := pending_evictions(attempt_dir)):
        _say(f"the step failed (exit {rc}) while a node was asked to leave the job "
             f"({_asked(asked)}): taking it as the eviction")
        return TRAINER_EVICTED
    return rc
