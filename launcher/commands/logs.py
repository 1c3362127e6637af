"""`gantry logs JOB [-f] [--err] [--rank N]`: print a job's Slurm output (or error) file, all
of it (the ranks' labels kept) or one rank's lines (labels removed); follow it to the end."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from launcher.errors import GantryError, UserInputError
from launcher.job_cli import add_jobs_dir_arg, follow_log, resolve_job


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser("logs", help="print a job's output",
                                   description="Print the job's Slurm output file (all attempts, "
                                               "appended across requeues). Each line a rank "
                                               "printed carries its rank's label (srun's "
                                               "`R: `, Open MPI's `[J,R]<stdout>:`, "
                                               "torchrun's `[torchrun:R] `).")
    parser.add_argument("job_ref", metavar="JOB", help="job id, directory or name")
    add_jobs_dir_arg(parser)
    parser.add_argument("-f", "--follow", action="store_true",
                        help="keep printing as the log grows until the job ends")
    parser.add_argument("--err", action="store_true", help="the error file instead of output")
    parser.add_argument("--rank", metavar="N", default=None,
                        help="only the lines rank N printed, without their labels (N: the "
                             "rank the program sees, RANK of a command job)")
    parser.set_defaults(func=run, exit_at_once=True)


def parse_rank(value: str | None) -> int | None:
    """--rank's value: a rank number, or None when not given."""
    if value is None:
        return None
    if not (value.isascii() and value.isdigit()) or len(value) > 7:
        raise UserInputError(f"--rank {value!r} is not allowed (expected a rank number: 0, "
                             "1, ...)")
    return int(value)


def run(args: argparse.Namespace) -> int:
    from launcher.job_logs import write_log
    from launcher.job_state import client_for_job
    from launcher.live.job_log import rank_filter

    rank = parse_rank(args.rank)
    _root, job_dir = resolve_job(args)
    job_id = job_dir.job_id
    if job_id is None:
        raise GantryError(f"{job_dir.path}: the job was never submitted (no job id)")
    stream = "err" if args.err else "out"
    if args.follow:
        keep = rank_filter(job_dir, rank) if rank is not None else None
        info = follow_log(job_dir, job_id, client_for_job(job_dir), stream=stream,
                          keep=keep)
        if info is not None:
            job_dir.record_state(info.to_json())
        return 0
    if not write_log(job_dir, sys.stdout, stream, rank):
        sys.stderr.write(f"no output yet ({job_dir.log_file(job_id, stream)} does not exist; "
                         "the job may be pending)\n")
    return 0
