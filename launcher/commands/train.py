"""`gantry train JOB.yaml`: run as one process per rank (mpirun / srun --mpi=pmix) or alone."""

from __future__ import annotations

import argparse
import os
import signal
import time
from pathlib import Path
from typing import Any

from launcher.errors import UserInputError


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "train", help="train a job's model with the native pipeline executor (per rank)"
    )
    parser.add_argument("job", type=Path, help="job YAML")
    parser.add_argument("--run-dir", type=Path, help="metrics/trace directory "
                        "(default: runs/<job name> next to the job file)")
    parser.add_argument("--lib", type=Path, help="libgantry_native.so (default: "
                        "$GANTRY_NATIVE_LIB, else native/build)")
    resume = parser.add_mutually_exclusive_group()
    resume.add_argument("--resume", action="store_true",
                        help="continue from the newest complete checkpoint, if any")
    resume.add_argument("--resume-from", type=Path, help="continue from this checkpoint dir")
    parser.add_argument("--site", type=Path, help="use the library `gantry build --site` made")
    parser.add_argument("--rank-order", type=Path, help="placement's rank-order file")
    parser.add_argument("--max-steps", type=int, help="stop after N steps in this run")
    parser.set_defaults(func=run)


LAUNCHED_RANK_ENV = ("OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK", "SLURM_PROCID")
"""Where a rank of `gantry train` finds its world rank before MPI starts: the MPI
launcher's own variable first (under mpirun in an allocation, SLURM_PROCID is the batch
step's, inherited by every rank)."""


QUIET_RANK_WAIT_S = 30.0
"""How long a rank other than 0 waits, on bad input, for rank 0 to report it and the
launcher to end the job."""


def launched_rank() -> int | None:
    """This process's world rank as its launcher set it; None when run alone."""
    for key in LAUNCHED_RANK_ENV:
        value = os.environ.get(key, "")
        if value.isascii() and value.isdigit():
            return int(value)
    return None


def _checked_job(args: argparse.Namespace, load_job: Any) -> Any:
    """The job spec, after the flags that need no MPI are checked (bad input: the same
    UserInputError on every rank)."""
    if args.max_steps is not None and args.max_steps < 1:
        raise UserInputError(f"--max-steps: {args.max_steps} is not allowed (expected >= 1)")
    return load_job(args.job)


def run(args: argparse.Namespace) -> int:
    from launcher.job_dir import RUNS_DIR
    from launcher.job_spec import load_job
    from launcher.train.agreement import QuietFailure
    from launcher.train.trainer import TrainOptions, resolve_job_path
    from launcher.train.trainer import run as train_run

    try:
        spec = _checked_job(args, load_job)
    except UserInputError as err:
        if launched_rank() not in (None, 0):  # every rank reads the same file: rank 0 says it
            # and leaves first: a rank that exited before it would have the launcher (mpirun,
            # srun --kill-on-bad-exit) kill rank 0 before its line is out. The launcher ends
            # this one once rank 0 has gone (srun with TERM, which must still read as the
            # bad input, not as a rank killed: that would be recovered, a node blamed); the
            # wait is only a bound.
            status = err.exit_status
            for signum in (signal.SIGTERM, signal.SIGINT):
                signal.signal(signum, lambda _s, _f: os._exit(status))
            time.sleep(QUIET_RANK_WAIT_S)
            return status
        raise
    base = args.job.resolve().parent
    library = args.lib
    if library is None and args.site is not None:
        from launcher.build import built_library
        from launcher.site_config import load_site

        library = built_library(load_site(args.site))
    run_dir = args.run_dir or base / RUNS_DIR / spec.name
    try:
        if run_dir.exists() and not run_dir.is_dir():
            raise UserInputError(f"--run-dir: {run_dir} exists and is not a directory")
        ckpt = resolve_job_path(base, spec.checkpoint.dir)
        if ckpt is not None and ckpt.exists() and not ckpt.is_dir():
            raise UserInputError(f"{args.job}: checkpoint.dir: {ckpt} exists and is not a "
                                 "directory")
    except (OSError, RuntimeError) as err:  # a link loop, a name too long
        raise UserInputError(f"--run-dir / checkpoint.dir: cannot use the path ({err})") from None
    options = TrainOptions(
        run_dir=run_dir,
        base_dir=base,
        library=library,
        resume=args.resume,
        resume_from=args.resume_from,
        rank_order=args.rank_order,
        max_steps=args.max_steps,
    )
    try:
        return train_run(spec, options)
    except QuietFailure as err:
        return err.exit_status
