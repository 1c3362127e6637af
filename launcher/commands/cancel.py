"""`gantry cancel JOB... | --state S | --name N`: cancel jobs (or signal them) through the
Slurm client."""

from __future__ import annotations

import argparse
import re
import sys
import time
from typing import Any

from launcher.console import print_json
from launcher.errors import GantryError, UserInputError
from launcher.job_cli import (
    add_job_filters,
    add_jobs_dir_arg,
    client_for_job,
    job_summary,
    selected_job_dirs,
    state_matches,
)
from launcher.job_dir import find_job_dir, jobs_root


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
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    if args.signal is not None and not re.match(r"^(SIG)?[A-Z0-9]{2,8}$", args.signal):
        raise UserInputError(f"--signal: {args.signal!r} is not allowed (expected a signal "
                             "name like USR1, TERM, INT)")
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
        infos = client_for_job(dirs[-1] if dirs else None).job_states(
            [str(d.job_id) for d in dirs]) if dirs else {}
        dirs = [d for d in dirs
                if state_matches(job_summary(d, infos.get(str(d.job_id))), args.state)]
    done = []
    for job_dir in dirs:
        job_id = str(job_dir.job_id)
        client_for_job(job_dir).cancel(job_id, args.signal)
        if args.signal:
            signal = f"SIG{args.signal.removeprefix('SIG')}"
            done.append({"job_id": job_id, "name": job_dir.name, "job_dir": str(job_dir.path),
                         "action": "signal", "signal": signal})
            line = f"sent {signal} to job {job_id}"
        else:
            job_dir.update_meta(cancelled_at=time.time())
            done.append({"job_id": job_id, "name": job_dir.name, "job_dir": str(job_dir.path),
                         "action": "cancel"})
            line = f"cancelled job {job_id}"
        if not args.json:
            sys.stdout.write(f"{line}\n")
    if args.json:
        print_json(done)
    elif not done:
        sys.stdout.write("no job matches\n")
    return 0
