"""Paths of the Slurm and munge binaries the embedded cluster runs.

Each one can be overridden by an environment variable (``GANTRY_<NAME>``, e.g.
``GANTRY_SLURMD=/opt/slurm/sbin/slurmd``), so a site with Slurm outside PATH works and a
test can point a tool at a recorded stand-in.
"""

from __future__ import annotations

import os
import shutil

from launcher.errors import GantryError

_SEARCH_DIRS = ("/usr/sbin", "/usr/bin", "/usr/local/sbin", "/usr/local/bin")


def env_var(name: str) -> str:
    """The override variable for a tool: slurmctld -> GANTRY_SLURMCTLD."""
    return "GANTRY_" + name.upper().replace("-", "_")


def path_of(name: str) -> str:
    """Absolute path of tool ``name``: its override, else PATH, else the sbin/bin dirs."""
    override = os.environ.get(env_var(name))
    if override:
        return override
    found = shutil.which(name)
    if found is None:
        for directory in _SEARCH_DIRS:
            candidate = os.path.join(directory, name)
            if os.access(candidate, os.X_OK):
                found = candidate
                break
    if found is None:
        raise GantryError(
            f"{name} not found on PATH or in {', '.join(_SEARCH_DIRS)} "
            f"(install slurm-wlm and munge, or set {env_var(name)})"
        )
    return found
