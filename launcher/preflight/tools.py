"""System roots for preflight, each overridable by environment; tools by the one tool rule.

Real sites put tools in odd places and tests inject faults through the same doors users
get. Tools are found by the one tool rule, :func:`launcher.slurm.tools.tool_path`
(``GANTRY_<TOOL>``: ``GANTRY_NVIDIA_SMI``, ``GANTRY_DMESG``, ``GANTRY_SCONTROL``,
``GANTRY_SRUN``, ``GANTRY_MPIRUN`` ...; Slurm's also in ``GANTRY_SLURM_BIN_DIR``; else
PATH); system roots by ``GANTRY_SYSFS_ROOT`` (root for /sys) and ``GANTRY_PROC_ROOT`` (root
for /proc). Preflight runs its tools with launcher/process_runner.py's :func:`run_tool`,
Slurm's with launcher/slurm/runner.py's :func:`run_slurm`.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path


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
