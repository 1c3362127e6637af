"""`gantry submit job.yaml`: resolve the job, then submit it through launcher/job_submit.py
(place on the live cluster, build the native trainer, render, create the job directory,
sbatch); maybe follow it live."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from launcher.errors import EXIT_FAILURE, EXIT_OK
from launcher.job_cli import add_request_args, overrides_from_args


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "submit", help="submit a training job to Slurm",
        description="Resolve the job (CLI flags > job YAML > site), render its batch script "
                    "into a new job directory and submit it with sbatch.")
    add_request_args(parser)
    parser.add_argument("--dry-run", action="store_true",
                        help="print the script (with --json: the script, its #SBATCH options, "
                             "placement and job directory as JSON); create and submit nothing")
    parser.add_argument("--test-only", action="store_true",
                        help="ask Slurm to validate the script (sbatch --test-only); submit "
                             "nothing and leave no job directory")
    parser.add_argument("-f", "--follow", action="store_true",
                        help="show the job live until it ends (placement, log, preflight "
                             "table, steps with loss/tokens/ETA, summary); exit 0 only if it "
                             "COMPLETED")
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    parser.set_defaults(func=run)


def sbatch_lines(script: str) -> list[str]:
    """The options of the script's ``#SBATCH`` header, in order."""
    return [line.removeprefix("#SBATCH ") for line in script.splitlines()
            if line.startswith("#SBATCH ")]


def run(args: argparse.Namespace) -> int:
    import tempfile

    from launcher.atomic_write import write_text
    from launcher.console import make_console, print_json
    from launcher.job_dir import SCRIPT_FILE, jobs_root
    from launcher.job_request import resolve_request
    from launcher.job_submit import prepare_job, submit_prepared
    from launcher.live.follow import follow_job

    request = resolve_request(args.job, args.site, overrides_from_args(args))
    root = jobs_root(args.jobs_dir)
    job = prepare_job(request, root, dry_run=args.dry_run, build=not args.test_only)
    for note in job.notes:
        sys.stderr.write(f"{note}\n")
    summary = job.placement.summary
    if args.dry_run:
        if args.json:
            print_json({"dry_run": True, "name": request.spec.name, "job_dir": str(job.path),
                        "placement": summary, "sbatch_options": sbatch_lines(job.script),
                        "script": job.script})
        else:
            sys.stdout.write(job.script)
        return EXIT_OK
    assert job.client is not None
    if args.test_only:
        with tempfile.TemporaryDirectory(prefix="gantry-test-only-") as tmp:
            script_path = Path(tmp) / SCRIPT_FILE
            write_text(script_path, job.script)
            verdict = job.client.test_submit(script_path)
        if args.json:
            print_json({"test_only": True, "name": request.spec.name, "placement": summary,
                        "verdict": verdict})
        else:
            sys.stdout.write(f"{verdict}\n")
        return EXIT_OK
    job_id, job_dir = submit_prepared(job, root)
    if args.json and not args.follow:
        print_json({"job_id": job_id, "job_dir": str(job_dir.path), "name": request.spec.name,
                    "placement": summary})
    elif not args.json:
        sys.stdout.write(f"submitted job {job_id} ({request.spec.name}): {job_dir.path}\n"
                         f"placement: {summary}\n")
    sys.stdout.flush()
    if not args.follow:
        return EXIT_OK
    # The live view (launcher/live): placement, log, preflight table, steps, summary. With
    # --json it goes to stderr and the summary is printed as JSON at the end.
    info, result = follow_job(job_dir, job_id, job.client, make_console(stderr=args.json))
    if info is not None:
        job_dir.record_state(info.to_json())
    if args.json:
        print_json({"job_id": job_id, "job_dir": str(job_dir.path), "summary": result.to_json()})
    return EXIT_OK if result.state == "COMPLETED" else EXIT_FAILURE
