"""`gantry logs JOB [-f]`: print a job's Slurm output (or error) file; follow it to the end."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from launcher.errors import GantryError
from launcher.job_cli import add_jobs_dir_arg, follow_log, resolve_job


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser("logs", help="print a job's output",
                                   description="Print the job's Slurm output file (all attempts, "
                                               "appended across requeues).")
    parser.add_argument("job_ref", metavar="JOB", help="job id, directory or name")
    add_jobs_dir_arg(parser)
    parser.add_argument("-f", "--follow", action="store_true",
                        help="keep printing as the log grows until the job ends")
    parser.add_argument("--err", action="store_true", help="the error file instead of output")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from launcher.job_logs import write_log
    from launcher.job_state import client_for_job

    _root, job_dir = resolve_job(args)
    job_id = job_dir.job_id
    if job_id is None:
        raise GantryError(f"{job_dir.path}: the job was never submitted (no job id)")
    stream = "err" if args.err else "out"
    if args.follow:
        info = follow_log(job_dir, job_id, client_for_job(job_dir), stream=stream)
        if info is not None:
            job_dir.update_meta(last_state=info.to_json())
        return 0
    if not write_log(job_dir, sys.stdout, stream):
        sys.stderr.write(f"no output yet ({job_dir.log_file(job_id, stream)} does not exist; "
                         "the job may be pending)\n")
    return 0
