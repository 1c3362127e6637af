"""External tools and system roots for preflight, each overridable by environment.

Real sites put tools in odd places and tests inject faults through the same doors users
get: ``GANTRY_NVIDIA_SMI``, ``GANTRY_DMESG``, ``GANTRY_SCONTROL``, ``GANTRY_SRUN``,
``GANTRY_MPIRUN``, ``GANTRY_SYSFS_ROOT`` (root for /sys) and ``GANTRY_PROC_ROOT`` (root for
/proc). Preflight runs them with launcher/process_runner.py's :func:`run_tool`.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Mapping
from pathlib import Path

TOOL_ENV = {
    "nvidia-smi": "GANTRY_NVIDIA_SMI",
    "dmesg": "GANTRY_DMESG",
    "scontrol": "GANTRY_SCONTROL",
    "sinfo": "GANTRY_SINFO",
    "squeue": "GANTRY_SQUEUE",
    "srun": "GANTRY_SRUN",
    "mpirun": "GANTRY_MPIRUN",
}
"""Tool name -> environment variable that overrides its path."""


def tool_path(name: str, env: Mapping[str, str] | None = None) -> str | None:
    """The executable for ``name``: the env override if set, else PATH lookup, else None."""
    environ = os.environ if env is None else env
    override = environ.get(TOOL_ENV.get(name, ""), "")
    if override:
        return override
    return shutil.which(name)


def tool_overridden(name: str, env: Mapping[str, str] | None = None) -> bool:
    """True when the user pointed ``name`` somewhere explicitly."""
    environ = os.environ if env is None else env
    return bool(environ.get(TOOL_ENV.get(name, ""), ""))


def sysfs_root(env: Mapping[str, str] | None = None) -> Path:
    """Root of the sysfs tree (``GANTRY_SYSFS_ROOT``, default /sys). Under an override, a
    subdirectory named after ``$SLURMD_NODENAME`` wins when present, so one node of a test
    cluster can carry a fault (as with the fake nvidia-smi's fixture directory)."""
    environ = os.environ if env is None else env
    override = environ.get("GANTRY_SYSFS_ROOT")
    if not override:
        return Path("/sys")
    node = environ.get("SLURMD_NODENAME", "")
    if node and "/" not in node and (Path(override) / node).is_dir():
        return Path(override) / node
    return Path(override)


def proc_root(env: Mapping[str, str] | None = None) -> Path:
    """Root of the procfs tree (``GANTRY_PROC_ROOT``, default /proc)."""
    environ = os.environ if env is None else env
    return Path(environ.get("GANTRY_PROC_ROOT") or "/proc")
