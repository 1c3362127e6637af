"""Job directories: one per submitted job, holding its script, resolved spec, placement, logs.

This module owns every name in a job directory, in its attempt directories and in a
checkpoint directory: the constants below, which every Python reader and writer uses.
Layout (root: --jobs-dir, else $GANTRY_JOBS_DIR, else ./gantry-jobs)::

    <root>/<name>-<UTC yyyymmdd-hhmmss>-<4 hex>/      $GANTRY_JOB_DIR in the batch script
        job.sbatch       the rendered batch script (what was submitted)
        spec.yaml        the job spec after CLI overrides
        request.json     resolved request: site, layout, flags used, gantry version
        placement.json   the placement: mode, plan (its nodes), Slurm options, cluster state
                         (launcher/placement_record.py reads it)
        rank_order.json  planned nodes in rank order (gantry train --rank-order), if planned
        meta.json        job id, submit time, last known state
        logs/            slurm-<jobid>.out / .err (append mode across requeues;
                         :func:`log_file_name`)
        schedules/       the schedule tables of the job, built once (train/schedule_cache.py)
        report/          `gantry report`'s output, by default
        runs/<name>/     `gantry train`'s run directory (<name>: the job's name;
                         :func:`train_run_dir`): metrics.jsonl, events.jsonl, trace.json
        runs/<jobid>-<restart>/   one attempt, written by the script ($GANTRY_ATTEMPT_DIR):
            preflight.jsonl   the preflight verdicts, one line per node
            passed_nodes      the nodes that passed them (the fabric test's nodes)
            fabric.json       the fabric test's record (rank 0's output)
            gate.json         the gate's report: verdicts, fabric verdict, drains, decision
            nodes             the nodes the gate chose
            launch_nodes      the nodes the step was launched on
            metrics.jsonl, metrics.replayed.jsonl, events.jsonl, trace.json   the trainer's
            stop-request      the signal the batch script got (its trap writes it)
            trainer-stop      the signal the trainer stopped on ("USR1 <step>")
            evictions/<node>.json   a node asked to leave the job (health monitor, straggler)
            node-health/<node>.jsonl   the run monitor's events on that node
            monitor-stop, monitor.log   the monitors' stop file and output
            torchrun_logs/    a torchrun job's worker output, per node and local rank
        runs/<jobid>-<restart>.<k>/   the k-th relaunch inside that allocation (recovery)
        node_faults.json, recoveries.jsonl   nodes a failed step was pinned on, recoveries
        stragglers.jsonl  ranks found slow and back to pace, every attempt (rank 0 writes it)
    <root>/by-id/<jobid> -> ../<dir>   lookup by Slurm job id

A checkpoint directory (the job's checkpoint.dir) holds ``step_<N>/`` (N zero-padded to 8
digits: :func:`checkpoint_step_dir`), each with its shards and ``manifest.json``, written last.

The directory is created only after the request resolved and the script rendered, and is
removed again if submission fails, so bad input leaves nothing behind.
"""

from __future__ import annotations

import json
import math
import os
import re
import time
from pathlib import Path
from typing import Any

from launcher.atomic_write import WriteError, made_directories, write_text
from launcher.errors import UserInputError, brief

JOBS_DIR_ENV = "GANTRY_JOBS_DIR"
#: The job directory, in the batch script's environment.
JOB_DIR_ENV = "GANTRY_JOB_DIR"
#: The attempt directory, in the batch script's environment.
ATTEMPT_DIR_ENV = "GANTRY_ATTEMPT_DIR"

# In a job directory.
SCRIPT_FILE = "job.sbatch"
SPEC_FILE = "spec.yaml"
REQUEST_FILE = "request.json"
PLACEMENT_FILE = "placement.json"
RANK_ORDER_FILE = "rank_order.json"
META_FILE = "meta.json"
LOGS_DIR = "logs"
RUNS_DIR = "runs"
SCHEDULES_DIR = "schedules"
REPORT_DIR = "report"
NODE_FAULTS_FILE = "node_faults.json"
RECOVERIES_FILE = "recoveries.jsonl"
STRAGGLERS_FILE = "stragglers.jsonl"
"""Straggler findings of every attempt (launcher/train/straggler_log.py); in a plain
`gantry train --run-dir` run, in the run directory."""
#: Beside the job directories, in the jobs root.
BY_ID_DIR = "by-id"

# In an attempt directory (also a `gantry train --run-dir`).
PREFLIGHT_REPORT_FILE = "preflight.jsonl"
PASSED_NODES_FILE = "passed_nodes"
FABRIC_FILE = "fabric.json"
GATE_RECORD_FILE = "gate.json"
CHOSEN_NODES_FILE = "nodes"
LAUNCH_NODES_FILE = "launch_nodes"
METRICS_FILE = "metrics.jsonl"
REPLAYED_METRICS_FILE = "metrics.replayed.jsonl"
EVENTS_FILE = "events.jsonl"
TRACE_FILE = "trace.json"
STOP_FILE = "trainer-stop"
STOP_REQUEST_FILE = "stop-request"
"""The signal the batch script's trap received ("USR1" / "TERM"), written before it forwards
it: the trainer's rank 0 reads it after every step, so a signal the step missed (sent while
srun was still creating it) still stops the run."""
RANKS_DIR = "ranks"
"""Per-rank start, heartbeat and exit records (launcher/train/rank_records.py)."""
HANG_FILE = "hang.json"
"""The watchdog's finding: which ranks stopped (launcher/train/watchdog.py)."""
STEP_ERR_FILE = "step.err"
"""The launcher's (srun's) standard error of the step (launcher/recovery/step_watch.py)."""
RECOVERY_FILE = "recovery.json"
"""What `gantry recover` found and did after this attempt's step failed."""
NEXT_NODES_FILE = "next_nodes"
"""The nodes `gantry recover` chose for the relaunch after this attempt."""
EVICTIONS_DIR = "evictions"
"""Requests that a node leave the job, one file per node (launcher/recovery/evictions.py)."""
HEALTH_DIR = "node-health"
"""The run monitor's events, one JSONL per node (launcher/monitor/run.py)."""
MONITOR_STOP_FILE = "monitor-stop"
"""Written by the batch script when the step ended: the monitors stop."""
MONITOR_LOG_FILE = "monitor.log"
"""The monitors' srun output (their stderr)."""
TORCHRUN_LOGS_DIR = "torchrun_logs"
"""A torchrun job's per-worker output files (torchrun's --log-dir: <run id>_<random>/attempt_0/
<local rank>/stdout.log, stderr.log)."""

# In a checkpoint directory.
CHECKPOINT_MANIFEST_FILE = "manifest.json"
CHECKPOINT_STEP_GLOB = "step_*"
"""Matches every step directory (and more: :func:`checkpoint_step_of` says which are)."""
_STEP_DIR = re.compile(r"step_([0-9]+)", re.ASCII)


def log_file_name(job_id: str, stream: str = "out") -> str:
    """The name in logs/ of the Slurm output (``out``) or error (``err``) file of job
    ``job_id`` (``%j``: the #SBATCH pattern of every attempt's)."""
    return f"slurm-{job_id}.{stream}"


def train_run_dir(job_dir: Path, name: str) -> Path:
    """Where `gantry train` writes metrics.jsonl, events and the trace of job ``name``."""
    return job_dir / RUNS_DIR / name


def checkpoint_step_dir(root: Path, step: int) -> Path:
    """The directory of step ``step``'s checkpoint under checkpoint directory ``root``."""
    return root / f"step_{step:08d}"


def checkpoint_step_of(name: str) -> int | None:
    """The step a ``step_<N>`` directory name holds (ASCII digits), else None."""
    match = _STEP_DIR.fullmatch(name)
    return int(match.group(1)) if match else None


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

    return root / f"{name}-{stamp}-{os.urandom(2).hex()}"


def _write_json(path: Path, data: Any) -> None:
    write_text(path, json.dumps(data, indent=2, sort_keys=True, default=str) + "\n", mode=0o644)


class JobDir:
    """A job directory on disk; equal to another of the same path. (A plain class, not a
    dataclass: `gantry status` would import inspect for it, a tenth of its start-up.)"""

    __slots__ = ("_path",)

    def __init__(self, path: Path) -> None:
        self._path = path

    @property
    def path(self) -> Path:
        """The directory."""
        return self._path

    def __eq__(self, other: object) -> bool:
        return isinstance(other, JobDir) and other._path == self._path

    def __hash__(self) -> int:
        return hash(self._path)

    def __repr__(self) -> str:
        return f"JobDir({str(self._path)!r})"

    @property
    def script(self) -> Path:
        return self.path / SCRIPT_FILE

    @property
    def logs(self) -> Path:
        return self.path / LOGS_DIR

    @property
    def runs(self) -> Path:
        """The attempt (and run) directories' parent."""
        return self.path / RUNS_DIR

    @property
    def spec(self) -> Path:
        return self.path / SPEC_FILE

    @property
    def request(self) -> Path:
        return self.path / REQUEST_FILE

    @property
    def placement(self) -> Path:
        return self.path / PLACEMENT_FILE

    def meta(self) -> dict[str, Any]:
        """meta.json (empty if missing or unreadable)."""
        try:
            data = json.loads((self.path / META_FILE).read_text(encoding="utf-8"))
        except (OSError, ValueError, RecursionError):  # UnicodeDecodeError is a ValueError
            return {}
        return data if isinstance(data, dict) else {}

    def record_state(self, state: dict[str, Any]) -> None:
        """Record Slurm's view of the job (``last_state``, with ``last_state_at``: when gantry
        first saw it) when it differs from the recorded one; the file is left alone
        otherwise."""
        if self.meta().get("last_state") != state:
            self.update_meta(last_state=state, last_state_at=time.time())

    def update_meta(self, **fields: Any) -> dict[str, Any]:
        """Merge ``fields`` into meta.json; return the result."""
        data = self.meta()
        data.update(fields)
        _write_json(self.path / META_FILE, data)
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
        return self.logs / log_file_name(job_id, stream)


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
    import yaml  # PyYAML loads when a job directory is made

    try:
        with made_directories(path.parent):
            path.mkdir()
            try:
                (path / LOGS_DIR).mkdir()
                (path / RUNS_DIR).mkdir()
                write_text(path / SCRIPT_FILE, script, mode=0o755)
                write_text(path / SPEC_FILE, yaml.safe_dump(spec, sort_keys=False), mode=0o644)
                _write_json(path / REQUEST_FILE, request)
                _write_json(path / PLACEMENT_FILE, placement)
                for file_name, text in (extra_files or {}).items():
                    write_text(path / file_name, text, mode=0o644)
                _write_json(path / META_FILE, {"name": name, "created_at": time.time()})
            except BaseException:
                import shutil

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
    import shutil

    shutil.rmtree(job_dir.path, ignore_errors=True)


def record_submission(root: Path, job_dir: JobDir, job_id: str) -> None:
    """Store the job id in meta.json and link ``<root>/by-id/<job_id>`` to the directory."""
    job_dir.update_meta(job_id=job_id, submitted_at=time.time())
    by_id = root / BY_ID_DIR
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
            if p.is_dir() and p.name != BY_ID_DIR and (p / META_FILE).is_file()]
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
        link = root / BY_ID_DIR / ref
        if link.exists():
            return JobDir(link.resolve())
        raise UserInputError(f"job {ref}: not submitted by gantry under {root} "
                             f"(no {link}; use --jobs-dir)")
    candidate = Path(ref)
    if candidate.is_dir() and (candidate / META_FILE).is_file():
        return JobDir(candidate.resolve())
    named = [d for d in list_job_dirs(root) if d.name == ref and d.job_id]
    if named:
        return named[-1]
    raise UserInputError(f"job {ref!r}: no such job id, job directory or job name under {root}")
