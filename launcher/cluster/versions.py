"""Which Slurm is installed (from `slurmd -V`) and which features that version supports.

Every version-dependent choice of the embedded cluster is made here, in `SlurmFeatures`,
so that rendering code asks "does this Slurm support X" instead of comparing numbers. The
version is read by the one reader, :meth:`topology.slurm_version.SlurmVersion.parse`.
"""

from __future__ import annotations

from dataclasses import dataclass

from launcher.errors import GantryError
from launcher.slurm.runner import run_slurm
from launcher.slurm.tools import require_tool
from topology.errors import TopologyInputError
from topology.placement.request import BLOCK_PLUGIN_SINCE
from topology.slurm_version import SlurmVersion


@dataclass(frozen=True)
class SlurmFeatures:
    """What the installed Slurm supports, as far as the embedded cluster cares."""

    version: SlurmVersion
    """The version these features were derived from."""
    block_topology: bool
    """topology/block is available (Slurm >= 23.11)."""
    topology_plugins: tuple[str, ...]
    """Values of the site's `topology.plugin` this Slurm can run."""


def features_for(version: SlurmVersion) -> SlurmFeatures:
    """The feature set of a given Slurm version (pure; unit-tested for 22.05 and 24.11)."""
    block = version >= BLOCK_PLUGIN_SINCE
    plugins = ("flat", "tree", "block") if block else ("flat", "tree")
    return SlurmFeatures(version=version, block_topology=block, topology_plugins=plugins)


def detect_version() -> SlurmVersion:
    """Run `slurmd -V` (path by the one tool rule) and parse its version."""
    slurmd = require_tool("slurmd")
    result = run_slurm([slurmd, "-V"], 30.0)
    if result.start_error is not None:
        raise GantryError(f"cannot run {slurmd} -V ({result.start_error}); is slurm-wlm "
                          "installed?")
    if result.returncode is None:
        raise GantryError(f"{slurmd} -V: {result.describe_failure()}")
    try:
        return SlurmVersion.parse(result.stdout + result.stderr, f"{slurmd} -V")
    except TopologyInputError as err:
        raise GantryError(str(err)) from None
