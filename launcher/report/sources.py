"""Where a report's inputs are: a run directory given directly, or a gantry job (id, job
directory or name) whose attempts live in ``<job dir>/runs/<job id>-<restart>/``."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from launcher.errors import GantryError, UserInputError
from launcher.job_dir import (
    METRICS_FILE,
    REPORT_DIR,
    RUNS_DIR,
    SPEC_FILE,
    TRACE_FILE,
    find_job_dir,
    jobs_root,
)
from topology.whole_numbers import read_whole


@dataclass(frozen=True)
class RunSources:
    """The files one report reads."""

    name: str
    """Job (or run directory) name for titles."""
    run_dirs: tuple[Path, ...]
    """Attempts with a metrics.jsonl, oldest first."""
    trace: Path | None
    """trace.json of the newest attempt that has one (written when training ends)."""
    spec: Path | None
    """Job spec (schedule, pp, m) when known."""
    job_dir: Path | None
    """The gantry job directory, when the report is for a job."""
    default_out: Path
    """Where the report goes unless told otherwise."""


def _attempt_key(path: Path) -> tuple[list[int], str]:
    """``<job id>-<restart>`` by its numbers (a part that is not 1-18 ASCII digits, e.g. "²",
    counts as -1), then by name."""
    parts = [read_whole(x) for x in path.name.split("-")]
    return [-1 if x is None else x for x in parts], path.name


def attempts_of(job_dir: Path) -> list[Path]:
    """Run directories of a job with metrics, oldest attempt first."""
    runs = job_dir / RUNS_DIR
    if not runs.is_dir():
        return []
    found = [p for p in runs.iterdir() if p.is_dir() and (p / METRICS_FILE).is_file()]
    return sorted(found, key=_attempt_key)


def _newest_trace(run_dirs: tuple[Path, ...]) -> Path | None:
    for run_dir in reversed(run_dirs):
        if (run_dir / TRACE_FILE).is_file():
            return run_dir / TRACE_FILE
    return None


def resolve_sources(ref: str, jobs_dir: Path | None = None,
                    spec: Path | None = None) -> RunSources:
    """``ref``: a run directory holding metrics.jsonl, else a job id / directory / name."""
    if spec is not None and not spec.is_file():
        raise UserInputError(f"--spec: {spec} does not exist (expected a job YAML)")
    candidate = Path(ref)
    if candidate.is_dir() and (candidate / METRICS_FILE).is_file():
        run_dir = candidate.resolve()
        job_dir = run_dir.parent.parent if run_dir.parent.name == RUNS_DIR else None
        if spec is None and job_dir is not None and (job_dir / SPEC_FILE).is_file():
            spec = job_dir / SPEC_FILE
        return RunSources(run_dir.name, (run_dir,), _newest_trace((run_dir,)), spec,
                          job_dir, run_dir / REPORT_DIR)
    job = find_job_dir(jobs_root(jobs_dir), ref)
    run_dirs = tuple(attempts_of(job.path))
    if not run_dirs:
        raise GantryError(f"{job.path}: no {METRICS_FILE} under runs/ yet (has the job "
                          f"started training? see `gantry status {ref}`)")
    if spec is None and job.spec.is_file():
        spec = job.spec
    return RunSources(job.name, run_dirs, _newest_trace(run_dirs), spec, job.path,
                      job.path / REPORT_DIR)
