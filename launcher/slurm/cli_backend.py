"""The Slurm client backend that runs the commands: sbatch, squeue, sacct, scontrol, scancel, sinfo.

State polling is batched: one ``squeue --json`` answers for any number of jobs (22.05 ignores
``--jobs`` with ``--json``, and newer versions fail the whole call if one id has aged out, so
the filter is applied here). Jobs squeue no longer knows are looked up with one
``sacct --json`` when accounting is enabled.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path

from launcher.errors import GantryError
from launcher.slurm.records import (
    JobInfo,
    NodeInfo,
    parse_nodes,
    parse_sacct,
    parse_squeue,
    parse_version,
)
from launcher.slurm.runner import CommandRunner, SlurmCommandError, first_line

#: The first version whose scontrol speaks --json (22.05 only has sinfo/squeue/sacct --json).
SCONTROL_JSON_SINCE = (23, 2, 0)


class CliSlurmClient:
    """SlurmClient over the Slurm commands, every call through one CommandRunner
    (``runner``; a default one when not given)."""

    backend = "cli"
    """Backend name."""

    def __init__(self, runner: CommandRunner | None = None) -> None:
        self.runner = runner if runner is not None else CommandRunner()
        self._version: tuple[int, int, int] | None = None
        self._accounting: bool | None = None

    def version(self) -> tuple[int, int, int]:
        if self._version is None:
            self._version = parse_version(self.runner.run(["sbatch", "--version"]).stdout,
                                          "sbatch --version")
        return self._version

    def submit(self, script: Path, extra_args: Sequence[str] = (),
               cwd: Path | None = None) -> str:
        argv = ["sbatch", "--parsable", *extra_args, str(script)]
        out = self.runner.run(argv).stdout.strip()
        job_id = out.split(";")[0].strip()
        if not job_id.isdigit():
            raise SlurmCommandError(argv, f"unexpected output {out!r} (expected a job id)")
        return job_id

    def test_submit(self, script: Path, extra_args: Sequence[str] = (),
                    cwd: Path | None = None) -> str:
        result = self.runner.run(["sbatch", "--test-only", *extra_args, str(script)])
        return first_line(result.stderr) or first_line(result.stdout)

    def job_states(self, job_ids: Iterable[str]) -> dict[str, JobInfo]:
        wanted = {str(j) for j in job_ids}
        if not wanted:
            return {}
        jobs = parse_squeue(self.runner.run(["squeue", "--all", "--json"]).stdout)
        found = {job.job_id: job for job in jobs if job.job_id in wanted}
        missing = wanted - set(found)
        if missing and self.accounting_enabled():
            found.update(self._sacct(sorted(missing)))
        return found

    def accounting_enabled(self) -> bool:
        """True when sacct answers (AccountingStorageType is not none)."""
        if self._accounting is None:
            try:
                result = self.runner.run(["sacct", "--noheader", "--jobs=1", "--format=JobID"],
                                         check=False)
            except SlurmCommandError:  # no sacct at all
                self._accounting = False
            else:
                self._accounting = result.returncode == 0
        return self._accounting

    def _sacct(self, job_ids: Sequence[str]) -> dict[str, JobInfo]:
        result = self.runner.run(["sacct", "--json", f"--jobs={','.join(job_ids)}"],
                                 check=False)
        if result.returncode != 0:
            return {}
        found: dict[str, JobInfo] = {}
        for job in parse_sacct(result.stdout):
            if job.job_id in job_ids:
                found[job.job_id] = job
        return found

    def job_info(self, job_id: str) -> JobInfo:
        jobs = self.job_states([job_id])
        if job_id not in jobs:
            raise GantryError(f"job {job_id}: Slurm does not know this job (any more)")
        return jobs[job_id]

    def cancel(self, job_id: str, signal: str | None = None) -> None:
        argv = ["scancel"]
        if signal:
            # To the batch shell (and its children), as #SBATCH --signal=B: does: the
            # script's trap forwards it to the running step and requeues.
            argv += ["--batch", f"--signal={signal}"]
        self.runner.run([*argv, job_id])

    def requeue(self, job_id: str, hold: bool = False) -> None:
        self.runner.run(["scontrol", "requeuehold" if hold else "requeue", job_id])

    def node_states(self, names: Iterable[str] | None = None) -> list[NodeInfo]:
        argv = (["scontrol", "--json", "show", "nodes"] if self.version() >= SCONTROL_JSON_SINCE
                else ["sinfo", "--json"])
        nodes = parse_nodes(self.runner.run(argv).stdout, " ".join(argv))
        if names is None:
            return nodes
        wanted = set(names)
        return [node for node in nodes if node.name in wanted]

    def drain(self, nodes: Sequence[str], reason: str) -> None:
        if not reason.strip():
            raise GantryError("drain: a reason is required")
        from topology import hostlists  # python-hostlist: not for every job query

        self.runner.run(["scontrol", "update", f"NodeName={hostlists.collect(nodes)}",
                         "State=DRAIN", f"Reason={reason}"])

    def resume(self, nodes: Sequence[str]) -> None:
        from topology import hostlists

        self.runner.run(["scontrol", "update", f"NodeName={hostlists.collect(nodes)}",
                         "State=RESUME"])
