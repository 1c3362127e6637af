"""`gantry logs JOB [-f]`: print a job's Slurm output (or error) file; follow it to the end."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from launcher.errors import GantryError
from launcher.job_cli import add_jobs_dir_arg, client_for_job, follow_log, resolve_job


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
    path = job_dir.log_file(job_id, stream)
    if not path.exists():
        sys.stderr.write(f"no output yet ({path} does not exist; the job may be pending)\n")
        return 0
    with path.open("rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 16), b""):
            sys.stdout.write(chunk.decode("utf-8", errors="replace"))
    return 0
