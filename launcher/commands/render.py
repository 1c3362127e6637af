"""`gantry render job.yaml`: print (or write) the batch script a submit would use.

The placement is computed from the site's live cluster when it answers (else Slurm chooses);
the native library path is where `gantry build --site` puts it (render builds nothing).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from launcher.job_cli import add_request_args, overrides_from_args


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "render", help="print the batch script of a job (nothing is submitted)",
        description="Render the batch script for a job spec. The job directory shown in it "
                    "is where `gantry submit` would put the job.")
    add_request_args(parser)
    parser.add_argument("-o", "--output", type=Path, default=None,
                        help="write the script here instead of stdout")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from launcher.atomic_write import write_text
    from launcher.build import library_path
    from launcher.job_dir import jobs_root, new_job_dir_path
    from launcher.job_placement import place_job, placement_notes
    from launcher.job_request import resolve_request
    from launcher.job_script import render_job
    from topology.user_files import require_writable_file

    request = resolve_request(args.job, args.site, overrides_from_args(args))
    if args.output is not None:  # before the placement's notes: an error is the only line
        require_writable_file(args.output, "--output")
    job_dir = new_job_dir_path(jobs_root(args.jobs_dir), request.spec.name)
    placement = place_job(request)
    library = None if request.spec.command else library_path(request.site)
    script = render_job(request, job_dir, Path.cwd(), placement.script_placement(),
                        library=library)
    for note in placement_notes(placement):
        sys.stderr.write(f"{note}\n")
    if args.output is None:
        sys.stdout.write(script)
        return 0
    write_text(args.output, script, label="--output")
    return 0
