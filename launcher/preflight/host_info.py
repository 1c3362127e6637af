"""Host facts from procfs (``GANTRY_PROC_ROOT``) and free space from statvfs.

Reads meminfo, cpuinfo, the mount table, uptime and the boot id; nothing here runs a tool.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence

from launcher.preflight.facts import DiskFacts, HostFacts
from launcher.preflight.tools import proc_root


def parse_meminfo(text: str) -> dict[str, float]:
    """``/proc/meminfo`` -> field -> MB (kB values divided by 1024)."""
    values: dict[str, float] = {}
    for line in text.splitlines():
        name, _, rest = line.partition(":")
        parts = rest.split()
        if not parts:
            continue
        try:
            number = float(parts[0])
        except ValueError:
            continue
        unit = parts[1].lower() if len(parts) > 1 else ""
        values[name.strip()] = number / 1024 if unit == "kb" else number / (1024 * 1024)
    return values


def parse_cpuinfo(text: str) -> int:
    """Number of ``processor`` entries in ``/proc/cpuinfo``."""
    return sum(1 for line in text.splitlines() if line.split(":")[0].strip() == "processor")


def parse_mounts(text: str) -> list[str]:
    """Mount points of ``/proc/self/mounts`` (octal escapes such as ``\\040`` decoded)."""
    points = []
    for line in text.splitlines():
        fields = line.split()
        if len(fields) >= 2:
            points.append(_unescape(fields[1]))
    return points


def _unescape(path: str) -> str:
    out, i = [], 0
    while i < len(path):
        if path[i] == "\\" and i + 3 < len(path) and path[i + 1 : i + 4].isdigit():
            out.append(chr(int(path[i + 1 : i + 4], 8)))
            i += 4
        else:
            out.append(path[i])
            i += 1
    return "".join(out)


def _read(path: os.PathLike[str] | str) -> str:
    with open(path, encoding="utf-8", errors="replace") as handle:
        return handle.read()


def read_uptime(env: Mapping[str, str] | None = None) -> float | None:
    """Seconds since boot (``<proc>/uptime``), None when unreadable."""
    try:
        return float(_read(proc_root(env) / "uptime").split()[0])
    except (OSError, ValueError, IndexError):
        return None


def read_boot_id(env: Mapping[str, str] | None = None) -> str | None:
    """The kernel's boot id, None when unreadable."""
    try:
        return _read(proc_root(env) / "sys/kernel/random/boot_id").strip() or None
    except OSError:
        return None


def collect_host(env: Mapping[str, str] | None = None) -> HostFacts:
    """Memory, CPU count and mount points from procfs."""
    root = proc_root(env)
    try:
        mem = parse_meminfo(_read(root / "meminfo"))
        cpus = parse_cpuinfo(_read(root / "cpuinfo"))
        mounts_path = root / "self/mounts"
        if not mounts_path.exists():
            mounts_path = root / "mounts"
        mounts = parse_mounts(_read(mounts_path))
    except OSError as err:
        return HostFacts(None, None, None, (), error=f"{err.filename}: {err.strerror}")
    return HostFacts(
        mem_total_mb=mem.get("MemTotal"),
        mem_available_mb=mem.get("MemAvailable"),
        cpu_count=cpus or None,
        mounts=tuple(mounts),
    )


def collect_disks(paths: Sequence[str]) -> list[DiskFacts]:
    """Free space of each directory (statvfs); a missing directory is recorded as an error."""
    disks = []
    for path in paths:
        expanded = os.path.expandvars(os.path.expanduser(path))
        try:
            st = os.statvfs(expanded)
        except OSError as err:
            disks.append(DiskFacts(path, None, None, error=f"{expanded}: {err.strerror}"))
            continue
        disks.append(
            DiskFacts(
                path=expanded,
                total_gb=st.f_blocks * st.f_frsize / 1e9,
                free_gb=st.f_bavail * st.f_frsize / 1e9,
            )
        )
    return disks
