"""The Slurm client interface every gantry command uses, whatever backend answers it."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Protocol

from launcher.slurm.records import JobInfo, NodeInfo


class SlurmClient(Protocol):
    """Submit, query and steer jobs and nodes. Implemented by the CLI and pyslurm backends."""

    backend: str
    """"cli" or "pyslurm"."""

    def version(self) -> tuple[int, int, int]:
        """The cluster's Slurm version (major, minor, micro)."""
        ...

    def submit(self, script: Path, extra_args: Sequence[str] = (),
               cwd: Path | None = None) -> str:
        """Submit a batch script; return the job id."""
        ...

    def test_submit(self, script: Path, extra_args: Sequence[str] = (),
                    cwd: Path | None = None) -> str:
        """Ask Slurm to validate a batch script without submitting (``sbatch --test-only``);
        return Slurm's estimate line; raise SlurmCommandError when Slurm rejects it."""
        ...

    def job_states(self, job_ids: Iterable[str]) -> dict[str, JobInfo]:
        """The jobs Slurm still knows among ``job_ids``, in one batched query."""
        ...

    def job_info(self, job_id: str) -> JobInfo:
        """One job; raise GantryError when Slurm does not know it."""
        ...

    def cancel(self, job_id: str, signal: str | None = None) -> None:
        """Cancel a job, or send ``signal`` to its batch shell (which forwards it)."""
        ...

    def requeue(self, job_id: str, hold: bool = False) -> None:
        """Requeue a job (and hold it when ``hold``)."""
        ...

    def node_states(self, names: Iterable[str] | None = None) -> list[NodeInfo]:
        """All nodes (or those in ``names``)."""
        ...

    def drain(self, nodes: Sequence[str], reason: str) -> None:
        """Drain ``nodes`` with ``reason``."""
        ...

    def resume(self, nodes: Sequence[str]) -> None:
        """Return drained ``nodes`` to service."""
        ...
