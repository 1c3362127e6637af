"""Submitting a resolved job: place it on the live cluster, build the native trainer, render
its script, create the job directory, sbatch. The one code path of `gantry submit` and the
Python API's ``submit()`` (launcher/api.py).

The native library is built (cached by `gantry build --site`) before anything is submitted,
so a missing compiler fails the submit rather than the job; the script pins that library with
`gantry train --lib`. Nothing is left behind when a step before sbatch fails.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import launcher
from launcher.errors import GantryError
from launcher.job_dir import (
    RANK_ORDER_FILE,
    JobDir,
    create_job_dir,
    new_job_dir_path,
    portable_spec,
    record_submission,
    remove_job_dir,
)
from launcher.job_placement import JobPlacement, place_job, placement_notes
from launcher.job_request import JobRequest
from launcher.site_slurm import site_client, slurm_access, slurm_conf_problem
from launcher.step_labels import scheme_for

if TYPE_CHECKING:  # the renderer (jinja2) loads when a job is rendered
    from launcher.sbatch_render import Placement
    from launcher.slurm import SlurmClient


@dataclass(frozen=True)
class PreparedJob:
    """A job placed and rendered, not yet submitted."""

    request: JobRequest
    path: Path
    """Its job directory (not created yet)."""
    placement: JobPlacement
    library: Path | None
    """The native trainer library the script pins (None: a command job, or not built)."""
    script: str
    """The batch script."""
    client: SlurmClient | None
    """The site's Slurm client (None for a dry run, which asks Slurm nothing)."""

    @property
    def notes(self) -> list[str]:
        """What the placement has to say (fewer free nodes than asked, ...)."""
        return placement_notes(self.placement)


def prepare_job(request: JobRequest, root: Path, dry_run: bool = False,
                build: bool = True) -> PreparedJob:
    """Place ``request`` (on the live cluster unless ``dry_run``), build its trainer (when
    ``build``) and render its script for a new job directory under ``root``."""
    from launcher.job_script import render_job
    from launcher.sbatch_render import Placement

    path = new_job_dir_path(root, request.spec.name)
    render_job(request, path, Path.cwd(), Placement())  # bad values fail before Slurm is asked
    client = None
    if not dry_run:
        problem = slurm_conf_problem(request.site)
        if problem is not None:
            raise GantryError(f"cannot submit: {problem}")
        client = site_client(request.site)
    placement = place_job(request, client)
    library = native_library(request, build=build and not dry_run)
    script = render_job(request, path, Path.cwd(), placement.script_placement(),
                        library=library)
    return PreparedJob(request, path, placement, library, script, client)


def submit_prepared(job: PreparedJob, root: Path) -> tuple[str, JobDir]:
    """Create the job directory, sbatch its script and record the job id; (job id, job dir).
    The directory is removed again when sbatch fails."""
    if job.client is None:
        raise GantryError("a dry run's job cannot be submitted (it asked Slurm nothing)")
    placement = job.placement
    extra = {RANK_ORDER_FILE: json.dumps(list(placement.rank_nodes)) + "\n"} \
        if placement.rank_nodes else {}
    record = request_record(job.request, placement.script_placement(), job.library)
    record["checkpoint_dir"] = checkpoint_dir(job.request, job.path)
    job_dir = create_job_dir(job.path, job.script,
                             portable_spec(job.request.raw, job.request.spec_path.parent),
                             record, placement.to_json(), job.request.spec.name, extra)
    try:
        job_id = job.client.submit(job_dir.script)
    except BaseException:
        remove_job_dir(job_dir)
        raise
    try:
        record_submission(root, job_dir, job_id)
    except (GantryError, OSError) as err:  # the job is in Slurm: its directory must stay
        raise GantryError(f"job {job_id} was submitted ({job_dir.path}) but not recorded there "
                          f"({err}): find it by its directory, not its id") from None
    return job_id, job_dir


def request_record(request: JobRequest, placement: Placement,
                   library: Path | None = None) -> dict[str, Any]:
    """request.json: what was resolved, for the record."""
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
        "slurm": slurm_access(request.site),
        "rank_labels": scheme_for(request.site.config.mpi.launcher,
                                  bool(request.spec.command) and request.spec.launch == "torchrun"),
    }


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
