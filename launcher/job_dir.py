"""Job directories: one per submitted job, holding its script, resolved spec, placement, logs.

Layout (root: --jobs-dir, else $GANTRY_JOBS_DIR, else ./gantry-jobs)::

    <root>/<name>-<UTC yyyymmdd-hhmmss>-<4 hex>/
        job.sbatch       the rendered batch script (what was submitted)
        spec.yaml        the job spec after CLI overrides
        request.json     resolved request: site, layout, flags used, gantry version
        placement.json   the placement: mode, planned nodes, Slurm options, cluster state
        rank_order.json  planned nodes in rank order (gantry train --rank-order), if planned
        meta.json        job id, submit time, last known state
        logs/            slurm-<jobid>.out / .err (append mode across requeues)
        runs/<jobid>-<restart>/   one directory per attempt, written by the script
        runs/<jobid>-<restart>.<k>/   the k-th relaunch inside that allocation (recovery)
        node_faults.json, recoveries.jsonl   nodes a failed step was pinned on, recoveries
    <root>/by-id/<jobid> -> ../<dir>   lookup by Slurm job id

The directory is created only after the request resolved and the script rendered, and is
removed again if submission fails, so bad input leaves nothing behind.
"""

from __future__ import annotations

import json
import math
import os
import re
import secrets
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from launcher.atomic_write import WriteError, made_directories, write_text
from launcher.errors import UserInputError, brief

JOBS_DIR_ENV = "GANTRY_JOBS_DIR"

_ATTEMPT_NAME = re.compile(r"([0-9]+(?:_[0-9]+)?)-([0-9]+)(?:\.([0-9]+))?")


def attempt_key(name: str) -> tuple[int, ...] | None:
    """Sort key of an attempt directory's name (``<job id>[_<array task>]-<restart>[.<k>]``:
    job id, array task, restart, relaunch inside the allocation); None for another name."""
    match = _ATTEMPT_NAME.fullmatch(name)
    if match is None:
        return None
    job, _, task = match.group(1).partition("_")
    return (int(job), int(task or 0), int(match.group(2)), int(match.group(3) or 0))


def jobs_root(cli_value: Path | None = None) -> Path:
    """The jobs root: the CLI's --jobs-dir, else $GANTRY_JOBS_DIR, else ./gantry-jobs."""
    env = os.environ.get(JOBS_DIR_ENV)
    chosen = (cli_value if cli_value is not None else Path(env) if env
              else Path.cwd() / "gantry-jobs")
    source = "--jobs-dir" if cli_value is not None else JOBS_DIR_ENV if env else "./gantry-jobs"
    try:
        return chosen.resolve()
    except (OSError, RuntimeError) as err:  # a link loop
        raise UserInputError(f"{source}: {chosen} cannot be resolved ({err})") from None


def new_job_dir_path(root: Path, name: str, now: float | None = None) -> Path:
    """A fresh (not yet created) job directory path for job ``name``."""
    stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime(now if now is not None else time.time()))
    return root / f"{name}-{stamp}-{secrets.token_hex(2)}"


def _write_json(path: Path, data: Any) -> None:
    write_text(path, json.dumps(data, indent=2, sort_keys=True, default=str) + "\n", mode=0o644)


@dataclass(frozen=True)
class JobDir:
    """A job directory on disk."""

    path: Path
    """The directory."""

    @property
    def script(self) -> Path:
        return self.path / "job.sbatch"

    @property
    def logs(self) -> Path:
        return self.path / "logs"

    def meta(self) -> dict[str, Any]:
        """meta.json (empty if missing or unreadable)."""
        try:
            data = json.loads((self.path / "meta.json").read_text(encoding="utf-8"))
        except (OSError, ValueError, RecursionError):  # UnicodeDecodeError is a ValueError
            return {}
        return data if isinstance(data, dict) else {}

    def update_meta(self, **fields: Any) -> dict[str, Any]:
        """Merge ``fields`` into meta.json; return the result."""
        data = self.meta()
        data.update(fields)
        _write_json(self.path / "meta.json", data)
        return data

    @property
    def job_id(self) -> str | None:
        value = self.meta().get("job_id")
        return str(value) if value is not None else None

    @property
    def name(self) -> str:
        return str(self.meta().get("name") or self.path.name)

    def log_file(self, job_id: str, stream: str = "out") -> Path:
        """The Slurm output (``out``) or error (``err``) file of ``job_id``."""
        return self.logs / f"slurm-{job_id}.{stream}"


#: Job spec fields holding paths that resolve against the job file's directory; they are
#: made absolute in the job directory's copy (checkpoint.dir is not: relative checkpoint
#: directories land in the job directory).
_SPEC_PATHS = (("train", "init_weights"), ("train", "data"))


def portable_spec(raw: dict[str, Any], spec_dir: Path) -> dict[str, Any]:
    """The job mapping for ``spec.yaml`` in the job directory: input paths made absolute."""
    data = dict(raw)
    for section, key in _SPEC_PATHS:
        values = data.get(section)
        if isinstance(values, dict) and isinstance(values.get(key), str):
            value = values[key]
            if not Path(value).is_absolute():
                data[section] = {**values, key: str(spec_dir / value)}
    return data


def create_job_dir(path: Path, script: str, spec: dict[str, Any], request: dict[str, Any],
                   placement: dict[str, Any], name: str,
                   extra_files: dict[str, str] | None = None) -> JobDir:
    """Create the job directory with its files (``extra_files``: name -> text); nothing is
    left behind if this fails (not the directory, not a jobs root it had to make)."""
    try:
        with made_directories(path.parent):
            path.mkdir()
            try:
                (path / "logs").mkdir()
                (path / "runs").mkdir()
                write_text(path / "job.sbatch", script, mode=0o755)
                write_text(path / "spec.yaml", yaml.safe_dump(spec, sort_keys=False), mode=0o644)
                _write_json(path / "request.json", request)
                _write_json(path / "placement.json", placement)
                for file_name, text in (extra_files or {}).items():
                    write_text(path / file_name, text, mode=0o644)
                _write_json(path / "meta.json", {"name": name, "created_at": time.time()})
            except BaseException:
                shutil.rmtree(path, ignore_errors=True)
                raise
    except FileExistsError:
        raise UserInputError(f"{path}: job directory already exists") from None
    except WriteError as err:
        raise UserInputError(f"{path}: cannot create the job directory ({err.path.name}: "
                             f"{err.reason})") from None
    except OSError as err:
        raise UserInputError(f"{path}: cannot create the job directory ({err.strerror})") from None
    return JobDir(path)


def remove_job_dir(job_dir: JobDir) -> None:
    """Delete a job directory that was never submitted."""
    shutil.rmtree(job_dir.path, ignore_errors=True)


def record_submission(root: Path, job_dir: JobDir, job_id: str) -> None:
    """Store the job id in meta.json and link ``<root>/by-id/<job_id>`` to the directory."""
    job_dir.update_meta(job_id=job_id, submitted_at=time.time())
    by_id = root / "by-id"
    by_id.mkdir(exist_ok=True)
    link = by_id / job_id
    tmp = by_id / f".{job_id}.tmp"
    tmp.unlink(missing_ok=True)
    tmp.symlink_to(Path("..") / job_dir.path.name)
    try:
        os.replace(tmp, link)
    finally:
        tmp.unlink(missing_ok=True)


def list_job_dirs(root: Path) -> list[JobDir]:
    """Every job directory under ``root`` with a meta.json, oldest first."""
    if not root.is_dir():
        return []
    dirs = [JobDir(p) for p in root.iterdir()
            if p.is_dir() and p.name != "by-id" and (p / "meta.json").is_file()]
    return sorted(dirs, key=lambda d: (_created_at(d), d.path.name))


def _created_at(job: JobDir) -> float:
    """meta.json's created_at; 0 when it is missing or not a number (one damaged job
    directory must not break every lookup by name)."""
    value = job.meta().get("created_at")
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) \
        and math.isfinite(value) else 0.0


def find_job_dir(root: Path, ref: str) -> JobDir:
    """The job directory for ``ref``: a Slurm job id, a directory path, or a job name (latest)."""
    if len(ref.encode()) > 4096 or any(len(p.encode()) > 255 for p in Path(ref).parts):
        raise UserInputError(f"job {brief(ref)}: not allowed (a job id, directory or name; "
                             "too long for a path)")
    if ref.isdigit():
        link = root / "by-id" / ref
        if link.exists():
            return JobDir(link.resolve())
        raise UserInputError(f"job {ref}: not submitted by gantry under {root} "
                             f"(no {link}; use --jobs-dir)")
    candidate = Path(ref)
    if candidate.is_dir() and (candidate / "meta.json").is_file():
        return JobDir(candidate.resolve())
    named = [d for d in list_job_dirs(root) if d.name == ref and d.job_id]
    if named:
        return named[-1]
    raise UserInputError(f"job {ref!r}: no such job id, job directory or job name under {root}")
