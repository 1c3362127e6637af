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
        "be gone), kill the launcher and exit with that rank's status.",
    )
    parser.add_argument("--attempt-dir", type=Path, required=True, help="the attempt dir")
    parser.add_argument("--grace", type=float, default=2.0,
                        help="seconds to let the launcher end by itself (default 2)")
    parser.set_defaults(func=run, passthrough=[])


def run(args: argparse.Namespace) -> int:
    from launcher.recovery.step_watch import watch_step

    argv = list(args.passthrough)
    if not argv:
        raise UserInputError("step-watch: no command after -- (expected the launcher argv)")
    if not 0 <= args.grace <= 3600:
        raise UserInputError(f"--grace: {args.grace:g} is not allowed (expected 0 .. 3600 s)")
    return watch_step(argv, args.attempt_dir, args.grace)
