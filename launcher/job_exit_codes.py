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

#: (code, meaning) in the order the script header lists them.
DOCUMENTED: tuple[tuple[int, str], ...] = (
    (OK, "training finished"),
    (GATE_REFUSED, "preflight gate refused the allocation (too few healthy nodes)"),
    (STEP_FAILED, "training step failed (its own exit code is logged)"),
    (REQUEUED, "stopped by USR1: checkpointed, then requeued"),
    (STOPPED, "stopped by a signal: not requeued (TERM, policy off, max_restarts reached)"),
    (SETUP_FAILED, "setup failed (attempt directory, node list)"),
)
