"""`gantry cancel JOB... | --state S | --name N`: cancel jobs (or signal them) through
launcher/job_state.py (what the Python API's ``Job.cancel()`` calls too)."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from launcher.job_cli import add_job_filters, add_jobs_dir_arg


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "cancel", help="cancel jobs",
        description="Cancel jobs submitted by gantry (or send them a signal). JOB is a Slurm "
                    "job id, a job directory or a job name (latest); several may be given. "
                    "Without JOB, --state or --name select among every job under the jobs "
                    "directory (one of them is needed).")
    parser.add_argument("job_refs", nargs="*", metavar="JOB", help="job id, directory or name")
    add_jobs_dir_arg(parser)
    add_job_filters(parser)
    parser.add_argument("--signal", default=None, metavar="SIG",
                        help="send this signal instead of cancelling (e.g. USR1: checkpoint "
                             "and requeue)")
    parser.add_argument("--json", action="store_true",
                        help="print what was done as JSON (a list, one object per job)")
    parser.set_defaults(func=run, exit_at_once=True)


def run(args: argparse.Namespace) -> int:
    from launcher.console import print_json
    from launcher.errors import GantryError, UserInputError
    from launcher.job_dir import find_job_dir, jobs_root
    from launcher.job_state import (
        cancel_job,
        check_signal,
        job_rows,
        selected_job_dirs,
        state_matches,
    )

    check_signal(args.signal)
    if not (args.job_refs or args.state or args.name):
        raise UserInputError("cancel: no job given (expected JOB..., or --state / --name to "
                             "select among all jobs)")
    root = jobs_root(args.jobs_dir)
    for ref in args.job_refs:
        job_dir = find_job_dir(root, ref)
        if job_dir.job_id is None:
            raise GantryError(f"{job_dir.path}: the job was never submitted (no job id)")
    dirs = selected_job_dirs(root, args.job_refs, args.name)
    if args.state:
        dirs = [d for d, row in zip(dirs, job_rows(dirs), strict=True)
                if state_matches(row, args.state)]
    done = []
    for job_dir in dirs:
        record = cancel_job(job_dir, args.signal)
        done.append(record)
        if not args.json:
            line = (f"sent {record['signal']} to job {record['job_id']}"
                    if record["action"] == "signal" else f"cancelled job {record['job_id']}")
            sys.stdout.write(f"{line}\n")
    if args.json:
        print_json(done)
    elif not done:
        sys.stdout.write("no job matches\n")
    return 0
