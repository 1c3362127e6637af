"""The demo's fault drill: a fake sysfs tree for ``GANTRY_SYSFS_ROOT``.

Every node sees one InfiniBand port ``mlx5_0/1`` ACTIVE / LinkUp at 400 Gb/s; the faulty node
(a subdirectory named after it, picked by preflight through ``$SLURMD_NODENAME``) sees that
port DOWN / Polling, as after a pulled cable or a dead transceiver. Preflight's
``net.ib_ports`` check fails on it and the gate drains it with ``gantry:net.ib_ports:...``.
"""

from __future__ import annotations

from pathlib import Path

from launcher.atomic_write import write_text

HEALTHY_PORT = {"state": "4: ACTIVE", "phys_state": "5: LinkUp",
                "rate": "400 Gb/sec (4X NDR)", "link_layer": "InfiniBand"}
"""Files of a healthy port."""
DOWN_PORT = {"state": "1: DOWN", "phys_state": "2: Polling", "rate": "10 Gb/sec (4X SDR)",
             "link_layer": "InfiniBand"}
"""Files of the faulty port (what a port without a link reports)."""


def _write_port(root: Path, files: dict[str, str]) -> None:
    port = root / "class" / "infiniband" / "mlx5_0" / "ports" / "1"
    (port / "counters").mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        write_text(port / name, text + "\n")
    write_text(port / "counters" / "link_downed", "0\n")


def write_fake_sysfs(root: Path, faulty_nodes: list[str]) -> Path:
    """Write the tree under ``root`` (created); returns ``root`` for GANTRY_SYSFS_ROOT."""
    _write_port(root, HEALTHY_PORT)
    for node in faulty_nodes:
        _write_port(root / node, DOWN_PORT)
    return root
