"""InfiniBand/RoCE ports from sysfs (``<sysfs>/class/infiniband/<hca>/ports/<n>/...``).

Reads state (``4: ACTIVE``), phys_state (``5: LinkUp``), rate (``400 Gb/sec (4X NDR)``),
link_layer and counters/link_downed. ``GANTRY_SYSFS_ROOT`` relocates /sys for tests.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from launcher.preflight.facts import IbPort
from launcher.preflight.nvsmi_parse import to_float, to_int
from launcher.preflight.tools import sysfs_root


def _read(path: Path) -> str | None:
    try:
        return path.read_text(encoding="utf-8", errors="replace").strip()
    except OSError:
        return None


def _state_name(raw: str | None) -> str | None:
    """``4: ACTIVE`` -> ``ACTIVE``; a bare word is kept as is."""
    if raw is None:
        return None
    return raw.split(":", 1)[-1].strip() or None


def collect_ib_ports(env: Mapping[str, str] | None = None) -> list[IbPort]:
    """Every port of every HCA under sysfs, sorted by device and port."""
    base = sysfs_root(env) / "class" / "infiniband"
    if not base.is_dir():
        return []
    ports = []
    for device in sorted(p for p in base.iterdir() if (p / "ports").is_dir()):
        for port_dir in sorted((device / "ports").iterdir(), key=lambda p: p.name):
            number = to_int(port_dir.name)
            if number is None:
                continue
            ports.append(
                IbPort(
                    device=device.name,
                    port=number,
                    state=_state_name(_read(port_dir / "state")),
                    phys_state=_state_name(_read(port_dir / "phys_state")),
                    rate_gbps=to_float(_read(port_dir / "rate")),
                    link_layer=_read(port_dir / "link_layer"),
                    link_downed=to_int(_read(port_dir / "counters" / "link_downed")),
                )
            )
    return ports
