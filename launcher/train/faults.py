"""Fault-injection hooks of the trainer, for tests only (real users never set these).

Each hook is an environment variable read by every rank; a hook that names a step fires at
most once per job: before firing, the rank creates ``<state dir>/fault-<name>.fired``
(O_EXCL), so the attempt that resumes after the fault runs clean. The state dir is
$GANTRY_FAULT_STATE_DIR, else $GANTRY_JOB_DIR (set by the batch script); with neither set a
hook fires every time. The marker's mtime is when the fault fired (recovery time is measured
from it).

- ``GANTRY_FAULT_CRASH_IN_CHECKPOINT=STEP[:RANK]``: the rank (default: every writing rank
  that gets there first) ``_exit(77)``s half-way through writing its shard of checkpoint STEP.
- ``GANTRY_FAULT_HANG=STEP[:RANK]``: the rank (default: the last) stops itself (SIGSTOP)
  before running step STEP (1-based, as in metrics.jsonl), like a peer gone mid-collective.
- ``GANTRY_FAULT_KILL=STEP[:RANK]``: the rank (default: the last) kills itself (SIGKILL)
  before running step STEP: a rank crashing on a healthy node, with no exit record.
- ``GANTRY_FAULT_STEP_DELAY_S=SECONDS``: every rank sleeps this long after each step, so
  that a test can act while the job is mid-run.
- ``GANTRY_FAULT_SLOW_CHECKPOINT_S=SECONDS``: every shard write sleeps this long before it
  writes (slow storage), so that a test can see a background write outlast steps.
- ``GANTRY_FAULT_SLOW_NODE=NODE:SECONDS``: every rank on node NODE (the node name the
  trainer records: SLURMD_NODENAME, else GANTRY_NODE_NAME, else the host name) sleeps
  SECONDS right before each native step and adds SECONDS to the ``compute_s`` (and
  ``total_s``) it reports for that step: a slow node, as the straggler detector sees it.
  The native executor times its compute ops inside the step, where Python cannot sleep, so
  the delay is added to the recorded time; its peers really wait for it (their step time
  grows by it). Not fire-once: a slow node stays slow.

Malformed values are one-line errors naming the variable (exit 2).
"""

from __future__ import annotations

import os
import signal
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from launcher.errors import UserInputError
from launcher.job_dir import JOB_DIR_ENV
from launcher.job_exit_codes import TRAINER_FAULT_INJECTED
from launcher.preflight.fabric_fault import parse_node_delay
from launcher.train.rank_records import record_exit

CRASH_IN_CHECKPOINT = "GANTRY_FAULT_CRASH_IN_CHECKPOINT"
HANG = "GANTRY_FAULT_HANG"
KILL = "GANTRY_FAULT_KILL"
STEP_DELAY = "GANTRY_FAULT_STEP_DELAY_S"
SLOW_CHECKPOINT = "GANTRY_FAULT_SLOW_CHECKPOINT_S"
SLOW_NODE = "GANTRY_FAULT_SLOW_NODE"
STATE_DIR = "GANTRY_FAULT_STATE_DIR"


@dataclass(frozen=True)
class StepFault:
    """A hook that fires at one step, on one rank or on any."""

    step: int
    """1-based step (checkpoint step for the crash hook)."""
    rank: int | None
    """World rank it fires on; None: the hook's default."""


def parse_step_fault(variable: str, value: str) -> StepFault:
    """``STEP`` or ``STEP:RANK`` -> StepFault; anything else is a UserInputError."""
    parts = value.split(":")
    if len(parts) in (1, 2) and all(p.isdigit() for p in parts) and int(parts[0]) >= 1:
        return StepFault(int(parts[0]), int(parts[1]) if len(parts) == 2 else None)
    raise UserInputError(
        f"{variable}: {value!r} is not allowed (expected STEP or STEP:RANK, STEP >= 1)"
    )


def step_fault(variable: str) -> StepFault | None:
    value = os.environ.get(variable)
    return parse_step_fault(variable, value) if value else None


def _seconds(variable: str) -> float:
    """A 0..3600 s delay hook's value (0 when unset)."""
    value = os.environ.get(variable)
    if not value:
        return 0.0
    try:
        delay = float(value)
    except ValueError:
        delay = -1.0
    if not 0.0 <= delay <= 3600.0:
        raise UserInputError(f"{variable}: {value!r} is not allowed (expected 0..3600 s)")
    return delay


def step_delay() -> float:
    return _seconds(STEP_DELAY)


def parse_slow_node(value: str) -> tuple[str, float]:
    """``NODE:SECONDS`` -> (node, seconds); anything else is a UserInputError."""
    return parse_node_delay(SLOW_NODE, value)


def slow_node_delay(node: str) -> float:
    """GANTRY_FAULT_SLOW_NODE: the seconds a rank on ``node`` adds to each step (0: none)."""
    value = os.environ.get(SLOW_NODE)
    if not value:
        return 0.0
    slow, delay = parse_slow_node(value)
    return delay if slow == node else 0.0


def slow_checkpoint() -> None:
    """GANTRY_FAULT_SLOW_CHECKPOINT_S: sleep before a shard write (slow storage)."""
    delay = _seconds(SLOW_CHECKPOINT)
    if delay:
        time.sleep(delay)


def check_environment() -> None:
    """Validates every hook up front (so a typo fails at start, not mid-run)."""
    step_fault(CRASH_IN_CHECKPOINT)
    step_fault(HANG)
    step_fault(KILL)
    step_delay()
    _seconds(SLOW_CHECKPOINT)
    slow_node_delay("")


def _state_dir() -> Path | None:
    value = os.environ.get(STATE_DIR) or os.environ.get(JOB_DIR_ENV)
    return Path(value) if value else None


def claim(name: str) -> bool:
    """True when this process may fire hook ``name`` (first time in this job)."""
    directory = _state_dir()
    if directory is None:
        return True
    try:
        fd = os.open(directory / f"fault-{name}.fired", os.O_CREAT | os.O_EXCL | os.O_WRONLY)
    except FileExistsError:
        return False
    os.write(fd, f"{time.time():.6f} pid {os.getpid()}\n".encode())
    os.close(fd)
    return True


def _say(message: str) -> None:
    sys.stderr.write(f"gantry fault hook: {message}\n")
    sys.stderr.flush()


def _step_hook_fires(variable: str, name: str, step: int, rank: int, world: int) -> bool:
    """A STEP[:RANK] hook (default rank: the last) fires on this rank before this step, the
    first time in this job."""
    fault = step_fault(variable)
    if fault is None or fault.step != step:
        return False
    target = world - 1 if fault.rank is None else fault.rank
    return rank == target and claim(name)


def maybe_hang(step: int, rank: int, world: int) -> None:
    """GANTRY_FAULT_HANG: SIGSTOP this process before step ``step`` (1-based)."""
    if _step_hook_fires(HANG, "hang", step, rank, world):
        _say(f"rank {rank} stops itself before step {step} (SIGSTOP)")
        os.kill(os.getpid(), signal.SIGSTOP)


def maybe_kill(step: int, rank: int, world: int) -> None:
    """GANTRY_FAULT_KILL: SIGKILL this process before step ``step`` (1-based)."""
    if _step_hook_fires(KILL, "kill", step, rank, world):
        _say(f"rank {rank} kills itself before step {step} (SIGKILL)")
        os.kill(os.getpid(), signal.SIGKILL)


def crash_point(step: int, rank: int) -> bool:
    """GANTRY_FAULT_CRASH_IN_CHECKPOINT: should this rank crash writing checkpoint ``step``?"""
    fault = step_fault(CRASH_IN_CHECKPOINT)
    if fault is None or fault.step != step or fault.rank not in (None, rank):
        return False
    return claim("crash-in-checkpoint")


def crash_now(what: str) -> None:
    _say(f"crashing in the middle of writing {what} (_exit {TRAINER_FAULT_INJECTED})")
    record_exit(TRAINER_FAULT_INJECTED, f"fault hook: crash writing {what}")
    os._exit(TRAINER_FAULT_INJECTED)


def after_step() -> None:
    delay = step_delay()
    if delay:
        time.sleep(delay)
