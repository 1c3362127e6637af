"""The pyslurm backend: Slurm's C API through pyslurm, used only when it matches the cluster.

pyslurm builds against one Slurm release (25.11 on PyPI today); talking to another release
through it is undefined, so :func:`pyslurm_usable` insists the major.minor versions agree.
Submission stays on ``sbatch`` (the rendered script carries its own #SBATCH header); reads and
controls go through pyslurm. Not importable on this host's Slurm 22.05, where ``auto`` picks
the CLI backend.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterable, Sequence
from types import ModuleType
from typing import Any

from launcher.errors import GantryError
from launcher.slurm.cli_backend import CliSlurmClient
from launcher.slurm.records import JobInfo, NodeInfo, exit_status, number, states
from launcher.slurm.runner import CommandRunner


def load_pyslurm() -> ModuleType | None:
    """The pyslurm module, or None when it is not installed or fails to load."""
    try:
        return importlib.import_module("pyslurm")
    except Exception:  # an ABI mismatch raises ImportError/OSError; any failure means "no"
        return None


def pyslurm_version(module: ModuleType) -> tuple[int, int] | None:
    """(major, minor) of the Slurm release pyslurm was built for ("25.11.0" -> (25, 11))."""
    raw = getattr(module, "__version__", None) or getattr(module, "version", lambda: None)()
    try:
        major, minor = str(raw).split(".")[:2]
        return int(major), int(minor)
    except (ValueError, TypeError):
        return None


def pyslurm_usable(cluster: tuple[int, int, int]) -> bool:
    """True when pyslurm imports and was built for the cluster's major.minor release."""
    module = load_pyslurm()
    return module is not None and pyslurm_version(module) == cluster[:2]


class PyslurmClient(CliSlurmClient):
    """SlurmClient reading jobs/nodes and controlling jobs through pyslurm (25.x API);
    ``module``: the imported pyslurm module (None: import it)."""

    backend = "pyslurm"

    def __init__(self, runner: CommandRunner | None = None, module: Any = None) -> None:
        super().__init__(runner)
        found = module if module is not None else load_pyslurm()
        if found is None:
            raise GantryError("slurm.client: pyslurm is not importable (use 'cli' or 'auto')")
        self.module: Any = found

    def job_states(self, job_ids: Iterable[str]) -> dict[str, JobInfo]:
        wanted = {str(j) for j in job_ids}
        jobs = self.module.Jobs.load()
        found: dict[str, JobInfo] = {}
        for job_id, job in jobs.items():
            if str(job_id) in wanted:
                state, flags = states(getattr(job, "state", None))
                code, signal = exit_status(getattr(job, "exit_code", None))
                found[str(job_id)] = JobInfo(
                    job_id=str(job_id), name=str(job.name or ""), state=state, flags=flags,
                    reason=str(getattr(job, "state_reason", "") or ""),
                    nodes=str(getattr(job, "nodes", "") or ""),
                    partition=str(getattr(job, "partition", "") or ""),
                    time_limit_min=number(getattr(job, "time_limit", None)),
                    exit_code=code, signal=signal,
                    restarts=number(getattr(job, "requeue_count", 0)) or 0,
                    stdout=str(getattr(job, "standard_output", "") or ""),
                )
        return found

    def cancel(self, job_id: str, signal: str | None = None) -> None:
        job = self.module.Job(int(job_id))
        if signal:
            job.send_signal(signal)
        else:
            job.cancel()

    def requeue(self, job_id: str, hold: bool = False) -> None:
        self.module.Job(int(job_id)).requeue(hold=hold)

    def node_states(self, names: Iterable[str] | None = None) -> list[NodeInfo]:
        nodes = self.module.Nodes.load()
        wanted = None if names is None else set(names)
        out: list[NodeInfo] = []
        for name, node in nodes.items():
            if wanted is not None and name not in wanted:
                continue
            state, flags = states(str(getattr(node, "state", "")).split("+"))
            out.append(NodeInfo(name=str(name), state=state, flags=flags,
                                reason=str(getattr(node, "reason", "") or ""),
                                reason_user=str(getattr(node, "reason_user", "") or "")))
        return out

    def drain(self, nodes: Sequence[str], reason: str) -> None:
        if not reason.strip():
            raise GantryError("drain: a reason is required")
        self.module.Node(",".join(nodes)).modify(
            self.module.Node(state="DRAIN", reason=reason))

    def resume(self, nodes: Sequence[str]) -> None:
        self.module.Node(",".join(nodes)).modify(self.module.Node(state="RESUME"))


def make_pyslurm_client(runner: Any, submit_version: tuple[int, int, int]) -> PyslurmClient:
    """A PyslurmClient, after checking it matches the cluster version."""
    if not pyslurm_usable(submit_version):
        raise GantryError(
            f"slurm.client: 'pyslurm' requested but pyslurm is missing or not built for "
            f"Slurm {submit_version[0]}.{submit_version[1]:02d}"
        )
    return PyslurmClient(runner=runner)
