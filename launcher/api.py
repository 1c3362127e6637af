"""gantry's Python API: submit a job, follow its state, read its log, cancel it.

    from launcher import api

    job = api.submit("examples/gpt2-tiny-pp2-dp2.yaml", nodes=4, time_limit="10")
    state = job.wait(timeout=600)          # "COMPLETED", "FAILED", ..., or "GONE"
    print(job.logs())
    print(job.result.metrics)

Each call is its command's code path, so the two cannot drift: :func:`submit` is `gantry
submit` (launcher/job_submit.py), :meth:`Job.status` and :meth:`Job.state` are `gantry status`
(launcher/job_state.py), :meth:`Job.logs` is `gantry logs` (launcher/job_logs.py),
:meth:`Job.cancel` is `gantry cancel`. Bad input raises
:class:`launcher.errors.UserInputError` with the message the CLI prints; other failures raise
:class:`launcher.errors.GantryError` (both have ``exit_status``); nothing is printed.
"""

from __future__ import annotations

import io
import os
import time
import typing
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any

from launcher.errors import GantryError, UserInputError
from launcher.job_dir import RUNS_DIR, JobDir, find_job_dir, jobs_root
from launcher.job_overrides import CliOverrides

if TYPE_CHECKING:
    from launcher.slurm import SlurmClient

__all__ = ["Job", "JobResult", "submit"]

PathLike = str | os.PathLike[str]


def submit(job: PathLike, site: PathLike | None = None, *, jobs_dir: PathLike | None = None,
           **overrides: Any) -> Job:
    """Submit the job YAML ``job`` to the site ``site`` (default as the CLI's: the job's
    ``site``, else site_configs/local.yaml) under ``jobs_dir`` (default as the CLI's:
    $GANTRY_JOBS_DIR, else ./gantry-jobs); return the submitted :class:`Job`.

    ``overrides`` are `gantry submit`'s flags by their field names (they win over the job
    YAML): ``name``, ``nodes``, ``spares``, ``gpus_per_node``, ``cpus_per_task``,
    ``time_limit``, ``partition``, ``account``, ``qos``, ``constraint``, ``exclusive``,
    ``mem``, ``hint``, ``gres``, ``container_image``, ``dependencies``, ``sbatch_options``,
    ``env`` (a mapping, or KEY=VALUE strings), ``preflight_level``, ``launch`` and
    ``command`` (an argv list: what `gantry submit job.yaml -- ARGV` runs)."""
    from launcher.job_request import resolve_request
    from launcher.job_submit import prepare_job, submit_prepared

    root = jobs_root(None if jobs_dir is None else Path(jobs_dir))
    request = resolve_request(Path(job), None if site is None else Path(site),
                              overrides_from_kwargs(overrides))
    prepared = prepare_job(request, root)
    job_id, job_dir = submit_prepared(prepared, root)
    return Job(job_id, job_dir.path, notes=tuple(prepared.notes))


def overrides_from_kwargs(values: Mapping[str, Any]) -> CliOverrides:
    """:class:`CliOverrides` from :func:`submit`'s keyword arguments, each checked against
    its field's type; UserInputError naming the keyword otherwise."""
    types = typing.get_type_hints(CliOverrides)
    given: dict[str, Any] = {}
    for name, value in values.items():
        if name not in types:
            raise UserInputError(f"submit(): {name}={value!r} is not allowed (expected one of "
                                 f"{', '.join(sorted(types))})")
        given[name] = _checked(name, value, types[name])
    return CliOverrides(**given)


def _checked(name: str, value: Any, kind: Any) -> Any:
    where = f"submit(): {name}={value!r} is not allowed"
    if value is None:
        return () if kind == tuple[str, ...] else None
    if kind == tuple[str, ...]:
        if name == "env" and isinstance(value, Mapping):
            value = [f"{key}={item}" for key, item in value.items()]
        if isinstance(value, str | bytes) or not isinstance(value, Sequence) \
                or not all(isinstance(item, str) for item in value):
            raise UserInputError(f"{where} (expected a list of strings"
                                 f"{', or a mapping' if name == 'env' else ''})")
        return tuple(value)
    if kind == int | None:
        if isinstance(value, bool) or not isinstance(value, int):
            raise UserInputError(f"{where} (expected a whole number)")
        return value
    if kind == bool | None:
        if value is not True:
            raise UserInputError(f"{where} (expected True, or leave it out)")
        return value
    if name == "time_limit" and isinstance(value, int) and not isinstance(value, bool):
        return str(value)  # minutes, as Slurm reads a bare number
    if not isinstance(value, str):
        raise UserInputError(f"{where} (expected a string)")
    return value


@dataclass(frozen=True)
class JobResult:
    """Where a job's outputs are (whether written yet or not), as `gantry status --json`
    reports them."""

    job_dir: Path
    log: Path | None
    """The Slurm output file (all attempts, appended across requeues)."""
    err_log: Path | None
    """The Slurm error file."""
    metrics: Path | None
    """`gantry train`'s metrics.jsonl (None for a command job)."""
    trace: Path | None
    """`gantry train`'s trace.json (Chrome/Perfetto; None for a command job)."""
    report_dir: Path
    """Where `gantry report JOB` writes by default."""
    checkpoint_dir: Path | None
    """The job's checkpoint.dir (None: checkpoints off)."""
    latest_checkpoint: Path | None
    """The newest complete checkpoint (what a resume takes), None before one is."""
    attempt_dirs: tuple[Path, ...] = ()
    """One per attempt (runs/<job id>-<restart>[.<k>]), oldest first."""

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> JobResult:
        """From a `gantry status --json` row."""
        def path(value: Any) -> Path | None:
            return None if value is None else Path(str(value))

        job_dir = Path(str(row["job_dir"]))
        logs = row.get("logs") or {}
        return cls(job_dir=job_dir, log=path(logs.get("out")), err_log=path(logs.get("err")),
                   metrics=path(row.get("metrics")), trace=path(row.get("trace")),
                   report_dir=Path(str(row["report_dir"])),
                   checkpoint_dir=path(row.get("checkpoint_dir")),
                   latest_checkpoint=path(row.get("latest_checkpoint")),
                   attempt_dirs=tuple(job_dir / RUNS_DIR / name
                                      for name in row.get("attempts") or ()))


@dataclass(frozen=True)
class Job:
    """A job gantry submitted: :func:`submit`'s answer, or :meth:`attach` to an existing one."""

    job_id: str
    """Slurm's job id."""
    job_dir: Path
    """Its job directory."""
    notes: tuple[str, ...] = field(default=(), compare=False)
    """What the placement had to say at submission (what `gantry submit` prints on
    standard error), e.g. that Slurm chooses the nodes because too few are free."""

    @classmethod
    def attach(cls, ref: PathLike | int, jobs_dir: PathLike | None = None) -> Job:
        """The job ``ref`` names, as `gantry status JOB` takes it: a Slurm job id, a job
        directory or a job name (the latest of that name) under ``jobs_dir``."""
        job_dir = find_job_dir(jobs_root(None if jobs_dir is None else Path(jobs_dir)),
                               os.fspath(ref) if not isinstance(ref, int) else str(ref))
        if job_dir.job_id is None:
            raise GantryError(f"{job_dir.path}: the job was never submitted (no job id)")
        return cls(job_dir.job_id, job_dir.path)

    @property
    def _dir(self) -> JobDir:
        return JobDir(self.job_dir)

    @cached_property
    def _client(self) -> SlurmClient:
        from launcher.job_state import client_for_job

        return client_for_job(self._dir)

    def status(self) -> dict[str, Any]:
        """What `gantry status JOB --json` prints: Slurm's record (one query), else the one
        last recorded (``"state": "GONE"``, ``"stale": true`` when that had not ended), the
        paths, attempts, recoveries, checkpoints and the goodput."""
        from launcher.job_state import one_job_row

        return one_job_row(self._dir, self._client)

    def state(self) -> str:
        """The job's state as `gantry status` has it: PENDING, RUNNING, COMPLETED, FAILED,
        CANCELLED, ..., or GONE when Slurm forgot a job whose last record had not ended."""
        from launcher.job_state import job_rows

        return str(job_rows([self._dir], self._client)[0]["state"])

    def wait(self, timeout: float | None = None, poll_s: float = 2.0) -> str:
        """Ask Slurm every ``poll_s`` seconds until the job ended (or is GONE) and return its
        final state; TimeoutError after ``timeout`` seconds (None: no limit)."""
        from launcher.job_state import is_final

        if not poll_s > 0:
            raise ValueError(f"wait(): poll_s={poll_s!r} (expected seconds > 0)")
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            row = self.status()
            if is_final(row):
                return str(row["state"])
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                raise TimeoutError(f"job {self.job_id}: still {row['state']} after "
                                   f"{timeout} s")
            time.sleep(poll_s if left is None else min(poll_s, left))

    def logs(self, stream: str = "out", rank: int | None = None) -> str:
        """The text `gantry logs JOB` prints (``stream="err"``: `gantry logs JOB --err`):
        every attempt's, appended across requeues; "" before the job wrote any.

        ``rank``: only that rank's lines, their labels removed (`gantry logs JOB --rank N`);
        a rank the job does not have is a UserInputError."""
        from launcher.job_logs import write_log

        out = io.StringIO()
        write_log(self._dir, out, stream, rank)
        return out.getvalue()

    def cancel(self, signal: str | None = None) -> dict[str, Any]:
        """Cancel the job, or send it ``signal`` (e.g. "USR1": checkpoint and requeue), as
        `gantry cancel JOB [--signal SIG]`; what was done, as its ``--json`` prints it."""
        from launcher.job_state import cancel_job, check_signal

        check_signal(signal, "cancel(): signal")
        return cancel_job(self._dir, signal, self._client)

    @property
    def result(self) -> JobResult:
        """Where the job's outputs are (the paths `gantry status --json` reports); asks
        Slurm nothing."""
        from launcher.job_state import job_paths, run_history

        return JobResult.from_row({**job_paths(self._dir), **run_history(self._dir)})
