"""``gantry step-watch``: run the training step, stop waiting for it once a rank failed."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from launcher.errors import UserInputError


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "step-watch",
        help="run a training step (srun/mpirun), stop waiting once a rank failed",
        description="Inside the batch script: run the launcher command after --, forward "
        "USR1/TERM/INT to it, keep its stderr in ATTEMPT_DIR/step.err, and once a rank "
        "recorded a failure while the launcher still waits GRACE seconds later (a node may "
        "be gone), kill the launcher and exit with that rank's status. With "
        "--stop-on-eviction (command jobs: the program cannot act on an eviction), once a "
        "node was asked to leave the job (ATTEMPT_DIR/evictions/), send the launcher TERM, "
        "kill it STOP_GRACE seconds later if still there, and exit 78 (TRAINER_EVICTED).",
    )
    parser.add_argument("--attempt-dir", type=Path, required=True, help="the attempt dir")
    parser.add_argument("--grace", type=float, default=2.0,
                        help="seconds to let the launcher end by itself (default 2)")
    parser.add_argument("--stop-on-eviction", action="store_true",
                        help="stop the step when a node is asked to leave the job (command "
                        "jobs; gantry's trainer checkpoints and stops by itself)")
    parser.add_argument("--stop-grace", type=float, default=None,
                        help="with --stop-on-eviction: seconds between the TERM and the KILL "
                        "(default 30)")
    parser.set_defaults(func=run, passthrough=[])


def run(args: argparse.Namespace) -> int:
    from launcher.recovery.step_watch import STOP_GRACE_S, watch_step

    argv = list(args.passthrough)
    if not argv:
        raise UserInputError("step-watch: no command after -- (expected the launcher argv)")
    if not 0 <= args.grace <= 3600:
        raise UserInputError(f"--grace: {args.grace:g} is not allowed (expected 0 .. 3600 s)")
    stop_grace = STOP_GRACE_S if args.stop_grace is None else args.stop_grace
    if not 0 <= stop_grace <= 3600:
        raise UserInputError(f"--stop-grace: {stop_grace:g} is not allowed (expected "
                             "0 .. 3600 s)")
    if args.stop_grace is not None and not args.stop_on_eviction:
        raise UserInputError("--stop-grace: allowed only with --stop-on-eviction")
    return watch_step(argv, args.attempt_dir, args.grace,
                      stop_on_eviction=args.stop_on_eviction, stop_grace_s=stop_grace)
