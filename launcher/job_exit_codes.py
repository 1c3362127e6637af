"""Exit codes of the generated batch script (documented in the script header and docs/jobs.md)."""

from __future__ import annotations

#: Training finished.
OK = 0
#: The preflight gate refused the allocation (too few healthy nodes).
GATE_REFUSED = 64
#: The training step failed; its own exit code is in the job log.
STEP_FAILED = 65
#: Stopped by USR1; the step was told to checkpoint and the job requeued itself.
REQUEUED = 66
#: Stopped by USR1 or TERM; not requeued (TERM, policy.requeue off, max_restarts reached).
STOPPED = 67
#: The script could not prepare (attempt directory, node list).
SETUP_FAILED = 68
#: The training step failed (crash, hang, lost node); the job requeued itself to resume
#: from the last complete checkpoint.
RECOVERING = 69
#: The job was requeued more than policy.max_restarts times (e.g. by Slurm on node failure).
RESTARTS_EXHAUSTED = 70

# Exit codes of `gantry train` itself (one process per rank), read by the batch script.
#: Stopped on USR1/TERM at an agreed step boundary after checkpointing on every rank.
TRAINER_STOPPED = 75
#: The watchdog saw no progress for policy.hang_timeout_s and aborted the rank (the launcher
#: then kills the step).
TRAINER_HUNG = 76
#: A fault hook (tests only, see launcher/train/faults.py) crashed the rank on purpose.
TRAINER_FAULT_INJECTED = 77
#: A node was asked to leave the job (launcher/recovery/evictions.py: the health monitor, the
#: straggler finder): every rank checkpointed the step and stopped (a command job's step was
#: stopped by `gantry step-watch`, launcher/recovery/step_watch.py); `gantry recover` puts a
#: spare in the node's place (or requeues the job without it).
TRAINER_EVICTED = 78
#: Bad input (job YAML, checkpoint given with --resume-from, ...): never retried.
TRAINER_BAD_INPUT = 2

#: (code, meaning) in the order the script header lists them.
DOCUMENTED: tuple[tuple[int, str], ...] = (
    (OK, "training finished"),
    (GATE_REFUSED, "preflight gate refused the allocation (too few healthy nodes)"),
    (STEP_FAILED, "training step failed (its own exit code is logged)"),
    (REQUEUED, "stopped by USR1: checkpointed, then requeued"),
    (STOPPED, "stopped by a signal: not requeued (TERM, policy off, max_restarts reached)"),
    (SETUP_FAILED, "setup failed (attempt directory, node list)"),
    (RECOVERING, "training step failed (crash, hang, lost node): requeued to resume"),
    (RESTARTS_EXHAUSTED, "requeued more than policy.max_restarts times: not run again"),
)
