"""gantry's Slurm client: one interface (``SlurmClient``), two backends, one command runner.

``make_client("auto")`` picks pyslurm when it is importable and built for the cluster's
release, else the command-line backend (always the case with this host's Slurm 22.05).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Literal

from launcher.errors import UserInputError
from launcher.slurm.cli_backend import CliSlurmClient
from launcher.slurm.client import SlurmClient
from launcher.slurm.pyslurm_backend import make_pyslurm_client, pyslurm_usable
from launcher.slurm.records import JobInfo, NodeInfo
from launcher.slurm.runner import CommandResult, CommandRunner, SlurmCommandError

__all__ = [
    "CliSlurmClient", "CommandResult", "CommandRunner", "JobInfo", "NodeInfo", "SlurmClient",
    "SlurmCommandError", "make_client", "recorded_client",
]


def make_client(choice: Literal["auto", "cli", "pyslurm"] | str = "auto",
                runner: CommandRunner | None = None) -> SlurmClient:
    """The Slurm client for ``choice`` (site ``slurm.client``)."""
    cli = CliSlurmClient(runner=runner or CommandRunner())
    if choice == "cli":
        return cli
    if choice == "pyslurm":
        return make_pyslurm_client(cli.runner, cli.version())
    if choice == "auto":
        # Only ask the cluster for its version when pyslurm could be used at all.
        from launcher.slurm.pyslurm_backend import load_pyslurm

        if load_pyslurm() is not None and pyslurm_usable(cli.version()):
            return make_pyslurm_client(cli.runner, cli.version())
        return cli
    raise UserInputError(f"slurm.client: {choice!r} is not allowed (expected auto, cli, pyslurm)")


def recorded_client(access: dict[str, str | None]) -> SlurmClient:
    """The client a job's request.json recorded at submit (``{"client", "slurm_conf"}``:
    launcher/site_slurm.slurm_access): an embedded site's slurm.conf only when SLURM_CONF
    is unset and the file is still there."""
    conf = access.get("slurm_conf")
    env = None
    if conf and not os.environ.get("SLURM_CONF") and Path(conf).is_file():
        env = {**os.environ, "SLURM_CONF": conf}
    return make_client(str(access.get("client") or "auto"), runner=CommandRunner(env=env))
