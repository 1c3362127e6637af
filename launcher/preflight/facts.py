"""The facts preflight collects once per run, before any check compares them.

Collectors (nvidia-smi/NVML, dmesg, sysfs, procfs, statvfs) fill these frozen records;
checks are pure functions over them. A value the source does not report (``N/A``,
``[Not Supported]``, a missing XML element) is None, never a guess.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class GpuFacts:
    """One GPU as the driver reports it."""

    index: int
    """Position in the driver's enumeration (0-based)."""
    bus_id: str
    """PCI bus id, e.g. 00000000:00:06.0."""
    name: str | None = None
    """Product name, e.g. NVIDIA H200."""
    uuid: str | None = None
    """GPU UUID."""
    driver_version: str | None = None
    """Kernel driver version."""
    persistence_mode: bool | None = None
    """Persistence mode enabled."""
    recovery_action: str | None = None
    """Driver's requested recovery action ("None", "Reset", "Reboot", "Drain ...")."""
    ecc_enabled: bool | None = None
    """ECC mode (current)."""
    ecc_volatile_uncorrectable: int | None = None
    """Uncorrectable ECC errors since the driver loaded (SRAM + DRAM)."""
    ecc_volatile_correctable: int | None = None
    """Correctable ECC errors since the driver loaded (SRAM + DRAM)."""
    ecc_aggregate_uncorrectable: int | None = None
    """Uncorrectable ECC errors over the GPU's lifetime (SRAM + DRAM)."""
    sram_threshold_exceeded: bool | None = None
    """The SRAM uncorrectable-error threshold was exceeded (RMA criterion)."""
    repair_pending: bool | None = None
    """A channel or TPC repair waits for a GPU reset."""
    unrepairable_memory: bool | None = None
    """The driver flags memory it cannot repair."""
    remap_pending: bool | None = None
    """Row remapping pending: the GPU needs a reset before the remap takes effect."""
    remap_failure: bool | None = None
    """A row remap failed (the GPU is out of spare rows)."""
    remapped_rows_uncorrectable: int | None = None
    """Rows remapped because of uncorrectable errors."""
    clock_events: dict[str, bool] = field(default_factory=dict)
    """Active clock-event (throttle) reasons by normalised name, e.g. hw_slowdown."""
    temperature_c: float | None = None
    """GPU core temperature."""
    memory_temperature_c: float | None = None
    """HBM temperature."""
    power_draw_w: float | None = None
    """Power draw (average when reported, else instant)."""
    power_limit_w: float | None = None
    """Enforced power limit."""
    default_power_limit_w: float | None = None
    """Default (factory) power limit."""
    pcie_gen_current: int | None = None
    """Current PCIe link generation."""
    pcie_gen_max: int | None = None
    """Maximum PCIe link generation of the GPU/link."""
    pcie_width_current: int | None = None
    """Current PCIe link width (lanes)."""
    pcie_width_max: int | None = None
    """Maximum PCIe link width (lanes)."""


@dataclass(frozen=True)
class NvlinkFacts:
    """NVLink state of one GPU."""

    gpu_index: int
    """GPU the links belong to."""
    link_active: dict[int, bool] = field(default_factory=dict)
    """Link number -> True when the link is up."""
    link_speed_gbps: dict[int, float] = field(default_factory=dict)
    """Link number -> speed in GB/s, for active links whose speed is reported."""
    errors: dict[int, dict[str, int]] = field(default_factory=dict)
    """Link number -> counter name (replay, recovery, crc) -> count."""


@dataclass(frozen=True)
class GpuInventory:
    """Everything collected about the node's GPUs (or why nothing could be)."""

    source: str
    """"nvidia-smi-xml", "nvidia-smi-csv", "nvml" or "none"."""
    gpus: tuple[GpuFacts, ...] = ()
    """The GPUs, in index order."""
    driver_version: str | None = None
    """Driver version reported once for the node."""
    nvlinks: tuple[NvlinkFacts, ...] = ()
    """NVLink state per GPU (empty when NVLink is absent or unreadable)."""
    nvlink_error: str | None = None
    """Why NVLink state could not be read, else None."""
    error: str | None = None
    """Why the GPUs could not be read (tool missing, hung, unparsable), else None."""
    evidence: str = ""
    """The command(s) that produced these facts."""


@dataclass(frozen=True)
class XidEvent:
    """One NVIDIA Xid line from the kernel log."""

    pci: str
    """PCI address as printed by NVRM, e.g. 0000:00:06."""
    code: int
    """Xid number."""
    uptime_s: float | None
    """Kernel timestamp (seconds since boot), None when the line had none."""
    text: str
    """The log line (trimmed)."""


@dataclass(frozen=True)
class KernelLog:
    """Xid events from dmesg, or why dmesg could not be read."""

    events: tuple[XidEvent, ...] = ()
    """All Xid lines in the readable kernel log."""
    uptime_s: float | None = None
    """Current uptime (to place events in the window)."""
    boot_id: str | None = None
    """Boot id, so events are de-duplicated per boot."""
    error: str | None = None
    """Why the log could not be read, else None."""


@dataclass(frozen=True)
class IbPort:
    """One InfiniBand/RoCE port from sysfs."""

    device: str
    """HCA name, e.g. mlx5_0."""
    port: int
    """Port number."""
    state: str | None
    """Logical state, e.g. ACTIVE, DOWN, INIT."""
    phys_state: str | None
    """Physical state, e.g. LinkUp, Polling, Disabled."""
    rate_gbps: float | None
    """Link rate in Gb/s."""
    link_layer: str | None
    """InfiniBand or Ethernet."""
    link_downed: int | None
    """counters/link_downed (times the link went down)."""


@dataclass(frozen=True)
class HostFacts:
    """Memory and CPUs from procfs."""

    mem_total_mb: float | None
    """MemTotal."""
    mem_available_mb: float | None
    """MemAvailable."""
    cpu_count: int | None
    """Logical processors in cpuinfo."""
    mounts: tuple[str, ...]
    """Mount points in the mount table."""
    error: str | None = None
    """Why procfs could not be read, else None."""


@dataclass(frozen=True)
class DiskFacts:
    """Free space of one directory the job needs."""

    path: str
    """The directory."""
    total_gb: float | None
    """Size of its filesystem (GB, 1e9 bytes)."""
    free_gb: float | None
    """Space available to unprivileged users (GB)."""
    error: str | None = None
    """Why it could not be measured (missing path), else None."""
