"""The one tool rule: where gantry finds Slurm's programs, munge's, and every other tool.

For a tool ``name`` (``scontrol``, ``slurmd``, ``nvidia-smi`` ...):

1. ``GANTRY_<NAME>`` (upper case, ``-`` as ``_``: ``GANTRY_SCONTROL``, ``GANTRY_NVIDIA_SMI``)
   names the executable;
2. else, for Slurm's own programs (:data:`SLURM_TOOLS`), ``GANTRY_SLURM_BIN_DIR/<name>``
   when that variable is set (the directory is taken as it is: a tool missing there is
   missing);
3. else PATH, and for Slurm's and munge's programs then the usual ``/usr/sbin``,
   ``/usr/bin``, ``/usr/local/sbin``, ``/usr/local/bin`` (the daemons live in sbin, which a
   user's PATH often lacks).

Tests inject faults through the same variables users set.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from launcher.errors import GantryError

SLURM_TOOLS = frozenset({
    "sacct", "sacctmgr", "salloc", "sattach", "sbatch", "sbcast", "scancel", "scontrol",
    "scrontab", "sdiag", "sinfo", "slurmctld", "slurmd", "slurmdbd", "slurmrestd",
    "slurmstepd", "sprio", "squeue", "sreport", "srun", "sshare", "sstat", "strigger", "sview",
})
"""Slurm's programs: the ones GANTRY_SLURM_BIN_DIR holds."""

MUNGE_TOOLS = frozenset({"munge", "munged", "mungekey", "remunge", "unmunge"})
"""munge's programs (Slurm's authentication; the embedded cluster runs its own munged)."""

BIN_DIR_ENV = "GANTRY_SLURM_BIN_DIR"
"""The directory holding Slurm's programs, when they are not found by PATH."""

SEARCH_DIRS = ("/usr/sbin", "/usr/bin", "/usr/local/sbin", "/usr/local/bin")
"""Searched after PATH for Slurm's and munge's programs."""


def tool_env_var(name: str) -> str:
    """The variable that overrides tool ``name``: slurmctld -> GANTRY_SLURMCTLD."""
    return "GANTRY_" + name.upper().replace("-", "_")


def tool_overridden(name: str, env: Mapping[str, str] | None = None) -> bool:
    """True when ``GANTRY_<NAME>`` points ``name`` somewhere explicitly."""
    return bool((os.environ if env is None else env).get(tool_env_var(name), ""))


def is_srun(program: str) -> bool:
    """True when ``program`` (a path or a name) is Slurm's srun."""
    return Path(program).name == "srun"


def on_path(name: str) -> str | None:
    """The first executable file ``name`` in this process's PATH (``shutil.which`` for a bare
    name, without importing shutil and its compression modules into every Slurm call)."""
    path = os.environ.get("PATH", os.defpath)
    if not path:
        return None
    for directory in path.split(os.pathsep):
        candidate = os.path.join(directory or os.curdir, name)
        if os.access(candidate, os.X_OK) and not os.path.isdir(candidate):
            return candidate
    return None


def tool_path(name: str, env: Mapping[str, str] | None = None) -> str | None:
    """The executable to run for tool ``name`` by the module's rule; None when not found.
    ``env`` holds the variables the rule reads (None: this process's); PATH is this
    process's."""
    environ = os.environ if env is None else env
    override = environ.get(tool_env_var(name), "")
    if override:
        return override
    bin_dir = environ.get(BIN_DIR_ENV, "")
    if bin_dir and name in SLURM_TOOLS:
        return str(Path(bin_dir) / name)
    found = on_path(name)
    if found is None and (name in SLURM_TOOLS or name in MUNGE_TOOLS):
        for directory in SEARCH_DIRS:
            candidate = os.path.join(directory, name)
            if os.access(candidate, os.X_OK):
                return candidate
    return found


def how_to_point_at(name: str) -> str:
    """The variables that tell gantry where ``name`` is (for "not found" messages)."""
    if name in SLURM_TOOLS:
        return f"set {tool_env_var(name)}, or {BIN_DIR_ENV} to Slurm's bin directory"
    return f"set {tool_env_var(name)}"


def require_tool(name: str, env: Mapping[str, str] | None = None) -> str:
    """:func:`tool_path`, or a GantryError saying where gantry looked and how to point it."""
    found = tool_path(name, env)
    if found is None:
        where = "PATH or " + ", ".join(SEARCH_DIRS) if (
            name in SLURM_TOOLS or name in MUNGE_TOOLS) else "PATH"
        raise GantryError(f"{name} not found on {where} (install slurm-wlm and munge, or "
                          f"{how_to_point_at(name)})")
    return found
