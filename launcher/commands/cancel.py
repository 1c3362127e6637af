"""`gantry cancel JOB`: cancel a job (or send it a signal) through the Slurm client."""

from __future__ import annotations

import argparse
import re
import sys
import time
from typing import Any

from launcher.errors import GantryError, UserInputError
from launcher.job_cli import add_jobs_dir_arg, client_for_job, resolve_job


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser("cancel", help="cancel a job",
                                   description="Cancel a job submitted by gantry.")
    parser.add_argument("job_ref", metavar="JOB", help="job id, directory or name")
    add_jobs_dir_arg(parser)
    parser.add_argument("--signal", default=None, metavar="SIG",
                        help="send this signal instead of cancelling (e.g. USR1: checkpoint "
                             "and requeue)")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    if args.signal is not None and not re.match(r"^(SIG)?[A-Z0-9]{2,8}$", args.signal):
        raise UserInputError(f"--signal: {args.signal!r} is not allowed (expected a signal "
                             "name like USR1, TERM, INT)")
    _root, job_dir = resolve_job(args)
    job_id = job_dir.job_id
    if job_id is None:
        raise GantryError(f"{job_dir.path}: the job was never submitted (no job id)")
    client_for_job(job_dir).cancel(job_id, args.signal)
    if args.signal:
        sys.stdout.write(f"sent SIG{args.signal.removeprefix('SIG')} to job {job_id}\n")
    else:
        job_dir.update_meta(cancelled_at=time.time())
        sys.stdout.write(f"cancelled job {job_id}\n")
    return 0
