"""The state of gantry's jobs and what acts on them: one code path for `gantry status`,
`gantry cancel` and the Python API (launcher/api.py).

A job's *row* is what ``gantry status --json`` prints for it: Slurm's record when Slurm still
knows the job, else the last one recorded in the job directory (marked GONE when that one had
not ended), the job's paths and its run history. :func:`job_rows` asks Slurm once for any
number of jobs.
"""

from __future__ import annotations

import fnmatch
import json
import re
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from launcher.errors import GantryError, UserInputError
from launcher.job_dir import (
    GATE_RECORD_FILE,
    METRICS_FILE,
    REPORT_DIR,
    TRACE_FILE,
    JobDir,
    attempt_key,
    checkpoint_step_dir,
    find_job_dir,
    list_job_dirs,
    train_run_dir,
)

if TYPE_CHECKING:  # the Slurm client loads when a job's state is asked for
    from launcher.slurm import JobInfo, SlurmClient

#: The state of a job Slurm no longer knows whose last record had not ended.
GONE = "GONE"


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


def client_for_job(job_dir: JobDir | None) -> SlurmClient:
    """The Slurm client the job's site asks for (``slurm.client``; an embedded site's own
    slurm.conf when SLURM_CONF is unset), default auto."""
    from launcher.slurm import make_client, recorded_client

    if job_dir is not None:
        try:
            request = json.loads(job_dir.request.read_text(encoding="utf-8"))
            access = request.get("slurm")
            if isinstance(access, dict):  # recorded at submit: no site config to load
                return recorded_client(access)
            from launcher.site_config import load_site
            from launcher.site_slurm import site_client

            return site_client(load_site(Path(request["site_path"])))
        except (OSError, KeyError, TypeError, ValueError, UserInputError):
            pass
    return make_client("auto")


def job_rows(dirs: Sequence[JobDir], client: SlurmClient | None = None) -> list[dict[str, Any]]:
    """The row of each job in ``dirs``, from one Slurm query (``client``: the last job's
    site's by default); Slurm's answer is recorded in each job directory (``last_state``,
    with ``last_state_at``, when gantry first saw that state) when it differs from what is
    recorded there: asking leaves the directory untouched while nothing changes."""
    if not dirs:
        return []
    client = client or client_for_job(dirs[-1])
    infos = client.job_states([str(d.job_id) for d in dirs])
    rows = []
    for job_dir in dirs:
        info = infos.get(str(job_dir.job_id))
        if info is not None:
            job_dir.record_state(info.to_json())
        rows.append(job_summary(job_dir, info))
    return rows


def one_job_row(job_dir: JobDir, client: SlurmClient | None = None) -> dict[str, Any]:
    """`gantry status JOB --json` (and the API's ``Job.status()``): the job's row and where
    its wall time went (``goodput``: launcher/report/goodput.py)."""
    from launcher.report.goodput import status_goodput

    row = job_rows([job_dir], client)[0]
    row["goodput"] = status_goodput(job_dir.path, row)
    return row


def job_summary(job_dir: JobDir, info: JobInfo | None) -> dict[str, Any]:
    """One job's row: Slurm's view when it has one, else the last recorded state.

    A job Slurm no longer knows whose record had not ended is ``"state": "GONE"``,
    ``"stale": true`` and its recorded state in ``last_seen_state`` (never shown as still
    RUNNING). Its paths are :func:`job_paths`'."""
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
            data["state"] = GONE
    data.update(job_paths(job_dir))
    data.update(run_history(job_dir))
    return data


def shown_state(row: dict[str, Any]) -> str:
    """The state as `gantry status` prints it: ``GONE (was RUNNING)`` for a stale one."""
    if row.get("stale"):
        return f"{GONE} (was {row.get('last_seen_state')})"
    return str(row.get("state"))


def _request_record(job_dir: JobDir) -> dict[str, Any]:
    """request.json ({} when it is missing or damaged)."""
    try:
        request = json.loads(job_dir.request.read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError):
        return {}
    return request if isinstance(request, dict) else {}


def is_final(row: dict[str, Any]) -> bool:
    """True when the row's job will not change any more: its record ended, or Slurm forgot
    it (GONE)."""
    return bool(row.get("terminal")) or row.get("state") == GONE


def job_paths(job_dir: JobDir) -> dict[str, Any]:
    """Where the job's files are (whether written yet or not): its directory, its Slurm
    output and error files (``logs``, ``%j`` expanded), the metrics and trace `gantry train`
    writes (None for a command job, which runs no gantry train) and the directory `gantry
    report` writes to by default. The checkpoints are :func:`run_history`'s."""
    job_id = job_dir.meta().get("job_id")
    trains = _request_record(job_dir).get("native_library") is not None
    run = train_run_dir(job_dir.path, job_dir.name)
    return {"job_dir": str(job_dir.path),
            "logs": ({stream: str(job_dir.log_file(str(job_id), stream))
                      for stream in ("out", "err")} if job_id is not None else {}),
            "metrics": str(run / METRICS_FILE) if trains else None,
            "trace": str(run / TRACE_FILE) if trains else None,
            "report_dir": str(job_dir.path / REPORT_DIR)}


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
    nodes they blamed, the gate's fabric verdict, the stragglers found (stragglers.jsonl's
    records, each with its ``line``), the checkpoint directory and its newest complete
    checkpoint (a step_<N> directory holding manifest.json, written last by the trainer)."""
    runs = job_dir.runs
    names = [p.name for p in runs.iterdir() if p.is_dir()] if runs.is_dir() else []
    attempts = sorted((n for n in names if attempt_key(n) is not None),
                      key=lambda name: attempt_key(name) or ())
    configured = _request_record(job_dir).get("checkpoint_dir")
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
            "checkpoint_dir": configured if isinstance(configured, str) else None,
            "latest_checkpoint_step": latest,
            "latest_checkpoint": None if latest is None else
            str(checkpoint_step_dir(Path(str(configured)), latest))}


_SIGNAL = re.compile(r"^(SIG)?[A-Z0-9]{2,8}$")


def check_signal(signal: str | None, where: str = "--signal") -> None:
    """UserInputError unless ``signal`` is None or a signal name (USR1, SIGTERM, ...)."""
    if signal is not None and not (isinstance(signal, str) and _SIGNAL.match(signal)):
        raise UserInputError(f"{where}: {signal!r} is not allowed (expected a signal name "
                             "like USR1, TERM, INT)")


def cancel_job(job_dir: JobDir, signal: str | None = None,
               client: SlurmClient | None = None) -> dict[str, Any]:
    """Cancel the job (or send it ``signal``, checked by :func:`check_signal`); what was done,
    as `gantry cancel --json` prints it. A cancel is recorded in the job directory."""
    check_signal(signal)
    job_id = job_dir.job_id
    if job_id is None:
        raise GantryError(f"{job_dir.path}: the job was never submitted (no job id)")
    (client or client_for_job(job_dir)).cancel(job_id, signal)
    done: dict[str, Any] = {"job_id": job_id, "name": job_dir.name,
                            "job_dir": str(job_dir.path)}
    if signal:
        return {**done, "action": "signal", "signal": f"SIG{signal.removeprefix('SIG')}"}
    job_dir.update_meta(cancelled_at=time.time())
    return {**done, "action": "cancel"}
