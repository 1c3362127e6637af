"""`gantry submit job.yaml`: resolve, place on the live cluster, build the native trainer,
render, create the job directory, sbatch; maybe follow.

The native library is built (cached by `gantry build --site`) here, before anything is
submitted, so a missing compiler fails the submit rather than the job; the script pins that
library with `gantry train --lib`.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

import launcher
from launcher.atomic_write import write_text
from launcher.console import make_console, print_json
from launcher.errors import EXIT_FAILURE, EXIT_OK, GantryError
from launcher.job_cli import add_request_args, overrides_from_args
from launcher.job_dir import (
    RANK_ORDER_FILE,
    SCRIPT_FILE,
    create_job_dir,
    jobs_root,
    new_job_dir_path,
    portable_spec,
    record_submission,
    remove_job_dir,
)
from launcher.job_placement import (
    place_job,
    placement_notes,
    site_client,
    slurm_conf_problem,
)
from launcher.job_request import JobRequest, resolve_request
from launcher.step_labels import scheme_for

if TYPE_CHECKING:  # the renderer (jinja2) and the live view load when a job is submitted
    from launcher.sbatch_render import Placement


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


def request_record(request: JobRequest, placement: Placement,
                   library: Path | None = None) -> dict[str, Any]:
    from launcher.job_script import layout_line

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
        "native_library": None if library is None else str(library),
        "checkpoint_dir": checkpoint_dir(request),
        "rank_labels": scheme_for(request.site.config.mpi.launcher,
                                  bool(request.spec.command) and request.spec.launch == "torchrun"),
    }


def sbatch_lines(script: str) -> list[str]:
    """The options of the script's ``#SBATCH`` header, in order."""
    return [line.removeprefix("#SBATCH ") for line in script.splitlines()
            if line.startswith("#SBATCH ")]


def checkpoint_dir(request: JobRequest, job_dir: Path | None = None) -> str | None:
    """Where the job's checkpoints go (relative dirs: inside the job directory)."""
    configured = request.spec.checkpoint.dir
    if configured is None:
        return None
    if Path(configured).is_absolute() or job_dir is None:
        return configured
    return str(job_dir / configured)


def native_library(request: JobRequest, build: bool) -> Path | None:
    """The site's native trainer library for a `gantry train` launch: built (cached) when
    ``build``, else only where it would be; None for a custom command."""
    from launcher.build import build_site, library_path

    if request.spec.command:
        return None
    if build:
        return build_site(request.site).library
    return library_path(request.site)


def run(args: argparse.Namespace) -> int:
    from launcher.job_script import render_job
    from launcher.live.follow import follow_job
    from launcher.sbatch_render import Placement

    request = resolve_request(args.job, args.site, overrides_from_args(args))
    root = jobs_root(args.jobs_dir)
    path = new_job_dir_path(root, request.spec.name)
    render_job(request, path, Path.cwd(), Placement())  # bad values fail before Slurm is asked
    client = None
    if not args.dry_run:
        problem = slurm_conf_problem(request.site)
        if problem is not None:
            raise GantryError(f"cannot submit: {problem}")
        client = site_client(request.site)
    placement = place_job(request, client)
    library = native_library(request, build=not (args.dry_run or args.test_only))
    script = render_job(request, path, Path.cwd(), placement.script_placement(),
                        library=library)
    for note in placement_notes(placement):
        sys.stderr.write(f"{note}\n")
    if args.dry_run:
        if args.json:
            print_json({"dry_run": True, "name": request.spec.name, "job_dir": str(path),
                        "placement": placement.summary, "sbatch_options": sbatch_lines(script),
                        "script": script})
        else:
            sys.stdout.write(script)
        return EXIT_OK
    assert client is not None
    if args.test_only:
        with tempfile.TemporaryDirectory(prefix="gantry-test-only-") as tmp:
            script_path = Path(tmp) / SCRIPT_FILE
            write_text(script_path, script)
            verdict = client.test_submit(script_path)
        if args.json:
            print_json({"test_only": True, "name": request.spec.name,
                        "placement": placement.summary, "verdict": verdict})
        else:
            sys.stdout.write(f"{verdict}\n")
        return EXIT_OK
    extra = {RANK_ORDER_FILE: json.dumps(list(placement.rank_nodes)) + "\n"} \
        if placement.rank_nodes else {}
    record = request_record(request, placement.script_placement(), library)
    record["checkpoint_dir"] = checkpoint_dir(request, path)
    job_dir = create_job_dir(path, script, portable_spec(request.raw, request.spec_path.parent),
                             record, placement.to_json(), request.spec.name, extra)
    try:
        job_id = client.submit(job_dir.script)
    except BaseException:
        remove_job_dir(job_dir)
        raise
    try:
        record_submission(root, job_dir, job_id)
    except (GantryError, OSError) as err:  # the job is in Slurm: its directory must stay
        raise GantryError(f"job {job_id} was submitted ({job_dir.path}) but not recorded there "
                          f"({err}): find it by its directory, not its id") from None
    if args.json and not args.follow:
        print_json({"job_id": job_id, "job_dir": str(job_dir.path), "name": request.spec.name,
                    "placement": placement.summary})
    elif not args.json:
        sys.stdout.write(f"submitted job {job_id} ({request.spec.name}): {job_dir.path}\n"
                         f"placement: {placement.summary}\n")
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
