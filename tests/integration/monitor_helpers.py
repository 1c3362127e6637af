"""Helpers of the run-monitor tests: per-node recorded health tools (the tool-path overrides
real sites get), the faults swapped in mid-run, the events the monitors wrote, and the
nodes' Slurm reasons."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tests.embedded_cluster import EmbeddedCluster
from tests.integration.resilience_helpers import Job
from tests.unit.preflight_helpers import FAKE_DMESG, FAKE_SMI, FIXTURES, HEALTHY, make_ib_tree

PORT = {"state": "4: ACTIVE", "phys_state": "5: LinkUp", "rate": "400 Gb/sec (4X NDR)",
        "link_layer": "InfiniBand", "link_downed": "0"}


def reasons(cluster: EmbeddedCluster) -> dict[str, str]:
    """Node -> its Slurm reason, for every node that has one."""
    shown = cluster.run("sinfo", "-h", "-R", "-N", "-o", "%N|%E").stdout
    return {node: reason for line in shown.splitlines() if "|" in line
            for node, reason in [line.split("|", 1)]}


def fault_tools(tmp: Path, nodes: list[str]) -> dict[str, str]:
    """Healthy per-node tools: a recorded H200 nvidia-smi, a clean kernel log, one IB port."""
    for node in nodes:
        shutil.copytree(HEALTHY, tmp / "smi" / node)
        make_ib_tree(tmp / "sys" / node, {"mlx5_0/1": PORT})
    shutil.copy(FIXTURES / "dmesg" / "clean.txt", tmp / "dmesg.txt")
    return {"GANTRY_NVIDIA_SMI": str(FAKE_SMI), "GANTRY_FAKE_SMI_DIR": str(tmp / "smi"),
            "GANTRY_DMESG": str(FAKE_DMESG), "GANTRY_FAKE_DMESG_FILE": str(tmp / "dmesg.txt"),
            "GANTRY_SYSFS_ROOT": str(tmp / "sys")}


def xid79(tmp: Path, node: str) -> None:
    """An Xid 79 (GPU fallen off the bus) line appears in ``node``'s kernel log."""
    staged = tmp / f"dmesg.staged.{node}"
    shutil.copy(FIXTURES / "dmesg" / "xid79.txt", staged)
    staged.replace(tmp / f"dmesg.txt.{node}")  # the fake dmesg's per-node file


def more_remapped_rows(tmp: Path, node: str) -> None:
    """``node``'s recorded nvidia-smi output is swapped for one with more remapped rows."""
    xml = tmp / "smi" / node / "nvidia-smi-q.xml"
    text = xml.read_text()
    healthy = "<remapped_row_unc>0</remapped_row_unc>"
    assert healthy in text
    staged = xml.with_name("q.staged")
    staged.write_text(text.replace(healthy, "<remapped_row_unc>2</remapped_row_unc>", 1))
    staged.replace(xml)


def link_downed(tmp: Path, node: str) -> None:
    """``node``'s IB port's link_downed counter rises."""
    counter = tmp / "sys" / node / "class/infiniband/mlx5_0/ports/1/counters/link_downed"
    staged = counter.with_name("staged")
    staged.write_text("3\n")
    staged.replace(counter)


FAULTS: dict[str, tuple[Callable[[Path, str], None], str, str]] = {
    "xid-79": (xid79, "gpu.xid", "health-xid-79"),
    "row-remap": (more_remapped_rows, "gpu.row_remap", "health-gpu0-rows"),
    "ib-link-downed": (link_downed, "net.ib_link_downed", "health-mlx5_0-1-flap"),
}
"""Fault name -> (inject it, the check that sees it, the drain reason's word)."""


def health_events(job: Job, attempt: str) -> list[dict[str, Any]]:
    """Every node's monitor events of one attempt."""
    directory = job.job_dir / "runs" / attempt / "node-health"
    if not directory.is_dir():
        return []
    return [json.loads(line) for path in sorted(directory.glob("*.jsonl"))
            for line in path.read_text().splitlines() if line.strip()]


def monitors_started(job: Job, attempt: str) -> set[str]:
    """The nodes whose monitor took its first sample in ``attempt``."""
    return {e["node"] for e in health_events(job, attempt) if e.get("event") == "start"}
