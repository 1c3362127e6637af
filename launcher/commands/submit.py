"""`gantry submit job.yaml`: resolve, render, create the job directory, sbatch; maybe follow."""

from __future__ import annotations

import argparse
import dataclasses
import sys
import tempfile
from pathlib import Path
from typing import Any

import launcher
from launcher.console import make_console, print_json
from launcher.errors import EXIT_FAILURE, EXIT_OK
from launcher.job_cli import add_request_args, overrides_from_args
from launcher.job_dir import (
    create_job_dir,
    jobs_root,
    new_job_dir_path,
    record_submission,
    remove_job_dir,
)
from launcher.job_request import JobRequest, resolve_request
from launcher.job_script import layout_line, render_job
from launcher.live.follow import follow_job
from launcher.sbatch_render import Placement
from launcher.slurm import make_client


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "submit", help="submit a training job to Slurm",
        description="Resolve the job (CLI flags > job YAML > site), render its batch script "
                    "into a new job directory and submit it with sbatch.")
    add_request_args(parser)
    parser.add_argument("--dry-run", action="store_true",
                        help="print the script; create and submit nothing")
    parser.add_argument("--test-only", action="store_true",
                        help="ask Slurm to validate the script (sbatch --test-only); submit "
                             "nothing and leave no job directory")
    parser.add_argument("-f", "--follow", action="store_true",
                        help="show the job live until it ends (placement, log, preflight "
                             "table, steps with loss/tokens/ETA, summary); exit 0 only if it "
                             "COMPLETED")
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    parser.set_defaults(func=run)


def request_record(request: JobRequest, placement: Placement) -> dict[str, Any]:
    return {
        "gantry_version": launcher.__version__,
        "spec_path": str(request.spec_path),
        "site_path": str(request.site.path),
        "site_name": request.site.config.name,
        "layout": layout_line(request),
        "ranks": request.ranks,
        "ranks_per_node": request.ranks_per_node,
        "gpus_per_node": request.gpus_per_node,
        "nodes_total": request.nodes_total,
        "partition": request.partition,
        "overrides": list(request.overrides_used),
        "placement": dataclasses.asdict(placement),
    }


def run(args: argparse.Namespace) -> int:
    request = resolve_request(args.job, args.site, overrides_from_args(args))
    root = jobs_root(args.jobs_dir)
    path = new_job_dir_path(root, request.spec.name)
    placement = Placement()
    script = render_job(request, path, Path.cwd(), placement)
    if args.dry_run:
        sys.stdout.write(script)
        return EXIT_OK
    client = make_client(request.site.config.slurm.client)
    if args.test_only:
        with tempfile.TemporaryDirectory(prefix="gantry-test-only-") as tmp:
            script_path = Path(tmp) / "job.sbatch"
            script_path.write_text(script, encoding="utf-8")
            verdict = client.test_submit(script_path)
        sys.stdout.write(f"{verdict}\n")
        return EXIT_OK
    job_dir = create_job_dir(path, script, request.raw, request_record(request, placement),
                             dataclasses.asdict(placement), request.spec.name)
    try:
        job_id = client.submit(job_dir.script)
    except BaseException:
        remove_job_dir(job_dir)
        raise
    record_submission(root, job_dir, job_id)
    if args.json and not args.follow:
        print_json({"job_id": job_id, "job_dir": str(job_dir.path), "name": request.spec.name})
    elif not args.json:
        sys.stdout.write(f"submitted job {job_id} ({request.spec.name}): {job_dir.path}\n")
    sys.stdout.flush()
    if not args.follow:
        return EXIT_OK
    # The live view (launcher/live): placement, log, preflight table, steps, summary. With
    # --json it goes to stderr and the summary is printed as JSON at the end.
    info, summary = follow_job(job_dir, job_id, client, make_console(stderr=args.json))
    if info is not None:
        job_dir.update_meta(last_state=info.to_json())
    if args.json:
        print_json({"job_id": job_id, "job_dir": str(job_dir.path), "summary": summary.to_json()})
    return EXIT_OK if summary.state == "COMPLETED" else EXIT_FAILURE
