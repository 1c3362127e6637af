"""Arguments and helpers shared by the job commands (render, submit, status, logs, cancel)."""

from __future__ import annotations

import argparse
import fnmatch
import json
import sys
import time
import typing
from collections.abc import Sequence
from pathlib import Path
from typing import IO, Any

from launcher.errors import UserInputError
from launcher.job_dir import (
    GATE_RECORD_FILE,
    JobDir,
    attempt_key,
    checkpoint_step_dir,
    find_job_dir,
    jobs_root,
    list_job_dirs,
)
from launcher.job_placement import site_client
from launcher.job_request import CliOverrides
from launcher.site_config import load_site
from launcher.slurm import JobInfo, SlurmClient, make_client
from launcher.step_labels import RankFilter


def add_jobs_dir_arg(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--jobs-dir", type=Path, default=None, metavar="DIR",
                        help="root of the job directories (default: $GANTRY_JOBS_DIR, "
                             "else ./gantry-jobs)")


def add_request_args(parser: argparse.ArgumentParser) -> None:
    """The job file, --site and the CLI overrides of common job fields."""
    parser.add_argument("job", type=Path, help="job spec YAML")
    parser.add_argument("--site", type=Path, default=None,
                        help="site config YAML (default: the job's `site`, else "
                             "site_configs/local.yaml)")
    add_jobs_dir_arg(parser)
    group = parser.add_argument_group("overrides (win over the job YAML)")
    types = typing.get_type_hints(CliOverrides)
    for name, flag in CliOverrides.flags():
        names = (flag.flag, flag.short) if flag.short else (flag.flag,)
        if types[name] == tuple[str, ...]:
            group.add_argument(*names, dest=name, action="append", default=[],
                               metavar=flag.metavar, help=flag.help)
        elif types[name] == bool | None:
            group.add_argument(*names, dest=name, action="store_const", const=True,
                               default=None, help=flag.help)
        else:
            group.add_argument(*names, dest=name, help=flag.help,
                               type=int if types[name] == int | None else str,
                               choices=list(flag.choices) or None, metavar=flag.metavar)
    parser.set_defaults(passthrough=[])
    parser.epilog = ("Arguments after `--` are a command every rank runs instead of "
                     "`gantry train` (each argument carried literally).")


def add_job_filters(parser: argparse.ArgumentParser) -> None:
    """--state and --name, which select among the jobs given (or all of them)."""
    parser.add_argument("--state", action="append", default=[], metavar="STATE",
                        help="only jobs in this state, e.g. RUNNING, PENDING, GONE "
                             "(repeatable; comma-separated lists too)")
    parser.add_argument("--name", action="append", default=[], metavar="NAME",
                        help="only jobs of this name (repeatable; shell-style patterns such "
                             "as 'gpt2-*')")


def selected_job_dirs(root: Path, refs: Sequence[str], names: Sequence[str]) -> list[JobDir]:
    """The submitted jobs ``refs`` name (each resolved as `find_job_dir`; none: every job
    under ``root``), those whose name matches one of ``names`` (when given), each once."""
    dirs = [find_job_dir(root, ref) for ref in refs] if refs else list_job_dirs(root)
    seen: set[Path] = set()
    chosen = []
    for job_dir in dirs:
        if job_dir.path in seen or not job_dir.job_id:
            continue
        if names and not any(fnmatch.fnmatchcase(job_dir.name, name) for name in names):
            continue
        seen.add(job_dir.path)
        chosen.append(job_dir)
    return chosen


def state_matches(row: dict[str, Any], states: Sequence[str]) -> bool:
    """True when ``states`` is empty or holds the row's state (case-insensitive)."""
    wanted = {part.strip().upper() for given in states for part in given.split(",")}
    return not wanted or str(row.get("state")).upper() in wanted


def overrides_from_args(args: argparse.Namespace) -> CliOverrides:
    """The overrides add_request_args parsed, and the command after `--`."""
    return CliOverrides.from_values(vars(args), args.passthrough)


def client_for_job(job_dir: JobDir | None) -> SlurmClient:
    """The Slurm client the job's site asks for (``slurm.client``; an embedded site's own
    slurm.conf when SLURM_CONF is unset), default auto."""
    if job_dir is not None:
        try:
            request = json.loads(job_dir.request.read_text(encoding="utf-8"))
            return site_client(load_site(Path(request["site_path"])))
        except (OSError, KeyError, ValueError, UserInputError):
            pass
    return make_client("auto")


def resolve_job(args: argparse.Namespace) -> tuple[Path, JobDir]:
    root = jobs_root(args.jobs_dir)
    return root, find_job_dir(root, args.job_ref)


def follow_log(job_dir: JobDir, job_id: str, client: SlurmClient, out: IO[str] = sys.stdout,
               stream: str = "out", poll_s: float = 0.5, state_every_s: float = 2.0,
               from_start: bool = True, keep: RankFilter | None = None) -> JobInfo | None:
    """Copy the job's log to ``out`` as it grows until the job ends; return its last state.
    ``keep``: only one rank's lines (launcher/step_labels.py), the rest at the end."""
    path = job_dir.log_file(job_id, stream)
    offset = 0 if from_start else (path.stat().st_size if path.exists() else 0)
    last_check = 0.0
    info: JobInfo | None = None
    while True:
        offset = _copy_new(path, offset, out, keep)
        now = time.monotonic()
        if now - last_check >= state_every_s:
            last_check = now
            info = client.job_states([job_id]).get(job_id)
            if info is None or info.terminal:
                time.sleep(poll_s)  # the last lines may land just after the state changes
                _copy_new(path, offset, out, keep)
                if keep is not None:
                    out.write(keep.finish())
                    out.flush()
                return info
        time.sleep(poll_s)


def _copy_new(path: Path, offset: int, out: IO[str], keep: RankFilter | None = None) -> int:
    try:
        with path.open("rb") as handle:
            handle.seek(offset)
            chunk = handle.read()
    except FileNotFoundError:
        return offset
    if chunk:
        text = chunk.decode("utf-8", errors="replace")
        out.write(text if keep is None else keep.feed(text))
        out.flush()
    return offset + len(chunk)


def job_summary(job_dir: JobDir, info: JobInfo | None) -> dict[str, Any]:
    """One job for `status`: Slurm's view when it has one, else the last recorded state.

    A job Slurm no longer knows whose record had not ended is ``"state": "GONE"``,
    ``"stale": true`` and its recorded state in ``last_seen_state`` (never shown as still
    RUNNING). ``logs`` are the job's Slurm output and error files (``%j`` expanded)."""
    meta = job_dir.meta()
    data: dict[str, Any] = {"job_id": meta.get("job_id"), "name": meta.get("name"),
                            "job_dir": str(job_dir.path)}
    if info is not None:
        data.update(info.to_json())
        data["source"] = "slurm"
        data["stale"] = False
    else:
        last = meta.get("last_state") or {}
        data.update(last)
        data["state"] = last.get("state", "UNKNOWN")
        data["source"] = "job directory (Slurm no longer knows the job)"
        # A record that ended (COMPLETED, FAILED, ...) is the job's last word; one that did
        # not (RUNNING, PENDING) is only what it was when gantry last looked.
        data["stale"] = not last.get("terminal", False)
        if data["stale"]:
            data["last_seen_state"] = data["state"]
            data["state"] = "GONE"
    data["job_dir"] = str(job_dir.path)
    job_id = data.get("job_id")
    data["logs"] = ({stream: str(job_dir.log_file(str(job_id), stream))
                     for stream in ("out", "err")} if job_id is not None else {})
    data.update(run_history(job_dir))
    return data


def fabric_line(runs: Path, attempts: list[str]) -> str | None:
    """The fabric verdict of the newest attempt whose gate ran it, from its gate record
    (``PASS on 3 nodes: ...``, ``FAIL: slow node n2 ...``); None when none did."""
    for name in reversed(attempts):
        try:
            record = json.loads((runs / name / GATE_RECORD_FILE).read_text(encoding="utf-8"))
        except (OSError, ValueError, RecursionError):
            continue
        fabric = record.get("fabric") if isinstance(record, dict) else None
        if isinstance(fabric, dict) and isinstance(fabric.get("message"), str):
            return str(fabric["message"]).removeprefix("fabric ")
    return None


def run_history(job_dir: JobDir) -> dict[str, Any]:
    """Attempts (runs/<job id>-<restart>[.<k>]), the recoveries inside the allocation and the
    nodes they blamed, the stragglers found (stragglers.jsonl's records, each with its
    ``line``), the checkpoint directory and its newest complete checkpoint (a
    step_<N> directory holding manifest.json, written last by the trainer)."""
    runs = job_dir.runs
    names = [p.name for p in runs.iterdir() if p.is_dir()] if runs.is_dir() else []
    attempts = sorted((n for n in names if attempt_key(n) is not None),
                      key=lambda name: attempt_key(name) or ())
    try:
        request = json.loads(job_dir.request.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        request = {}
    configured = request.get("checkpoint_dir") if isinstance(request, dict) else None
    latest: int | None = None
    if isinstance(configured, str):
        root = Path(configured)
        from launcher.train.checkpoint import complete_steps  # numpy: only when asked

        latest = max(complete_steps(root), default=None)
    from launcher.recovery.node_faults import describe_recovery, read_faults, read_recoveries
    from launcher.train.straggler_log import describe, read_stragglers

    return {"attempts": attempts, "fabric": fabric_line(runs, attempts),
            "recoveries": [describe_recovery(r) for r in read_recoveries(job_dir.path)],
            "stragglers": [{**r, "line": describe(r)} for r in read_stragglers(job_dir.path)],
            "faulty_nodes": {node: {"count": fault.count, "last": fault.last}
                             for node, fault in read_faults(job_dir.path).items()},
            "checkpoint_dir": configured,
            "latest_checkpoint_step": latest,
            "latest_checkpoint": None if latest is None else
            str(checkpoint_step_dir(Path(str(configured)), latest))}
