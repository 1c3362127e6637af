"""What checks compare: the collected node facts, the site's expectations, counter baselines."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from launcher.preflight.facts import DiskFacts, GpuInventory, HostFacts, IbPort, KernelLog
from launcher.preflight.xid_actions import DEFAULT_XID_ACTIONS, xid_table
from launcher.site_config import SiteConfig


@dataclass(frozen=True)
class Expectations:
    """What the site says a healthy node looks like."""

    gpus_per_node: int = 0
    """GPUs the node must have (0: CPU-only site)."""
    gpu_model: str | None = None
    """Required product name, e.g. NVIDIA H200."""
    driver_version: str | None = None
    """Required driver version."""
    cpus: int = 1
    """Logical CPUs the node must have."""
    real_memory_mb: int = 1
    """Memory the node must have (MB)."""
    disk_paths: tuple[str, ...] = ("/tmp",)
    """Directories whose free space is checked."""
    required_mounts: tuple[str, ...] = ()
    """Mount points that must exist."""
    xid_actions: Mapping[int, str] = field(default_factory=lambda: dict(DEFAULT_XID_ACTIONS))
    """What each Xid calls for (launcher/preflight/xid_actions.py): the site's table."""

    @classmethod
    def from_site(cls, site: SiteConfig) -> Expectations:
        pf = site.preflight
        return cls(
            gpus_per_node=site.nodes.gpus_per_node,
            gpu_model=site.nodes.gpu_model,
            driver_version=pf.driver_version,
            cpus=site.nodes.cpus,
            real_memory_mb=site.nodes.real_memory_mb,
            disk_paths=tuple(pf.disk_paths),
            required_mounts=tuple(pf.required_mounts),
            xid_actions=xid_table(pf.xid_actions),
        )


@dataclass(frozen=True)
class Baseline:
    """Error counters recorded by the previous run on this node (same boot only)."""

    boot_id: str | None
    """Boot the counters belong to; counters from another boot are not compared."""
    counters: dict[str, int] = field(default_factory=dict)
    """Counter key (nvlink/<gpu>/<link>/<name>, ib/<hca>/<port>/link_downed) -> value."""


@dataclass(frozen=True)
class NodeFacts:
    """Everything collected once on the node."""

    gpu: GpuInventory
    """GPU inventory (source "none" when the node has no GPU tooling)."""
    kernel: KernelLog
    """Xid events from the kernel log."""
    ib_ports: tuple[IbPort, ...]
    """InfiniBand/RoCE ports."""
    host: HostFacts
    """Memory, CPUs, mounts."""
    disks: tuple[DiskFacts, ...]
    """Free space per disk path."""
    previous: Baseline | None = None
    """Counters of the previous run (None on the first run)."""


def current_counters(facts: NodeFacts) -> dict[str, int]:
    """The error counters of this run, keyed like Baseline.counters."""
    counters: dict[str, int] = {}
    uuids = {g.index: (g.uuid or g.bus_id) for g in facts.gpu.gpus}
    for nv in facts.gpu.nvlinks:
        gpu = uuids.get(nv.gpu_index, str(nv.gpu_index))
        for link, values in nv.errors.items():
            for name, value in values.items():
                counters[f"nvlink/{gpu}/{link}/{name}"] = value
    for port in facts.ib_ports:
        if port.link_downed is not None:
            counters[f"ib/{port.device}/{port.port}/link_downed"] = port.link_downed
    return counters


def counter_deltas(facts: NodeFacts, prefix: str) -> dict[str, int] | None:
    """Growth of each ``prefix`` counter since the previous run of the same boot.

    None when there is nothing to compare with (first run, or the node rebooted).
    """
    prev = facts.previous
    if prev is None or prev.boot_id is None or prev.boot_id != facts.kernel.boot_id:
        return None
    deltas = {}
    for key, value in current_counters(facts).items():
        if key.startswith(prefix) and key in prev.counters:
            deltas[key] = value - prev.counters[key]
    return deltas
