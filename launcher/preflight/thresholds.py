"""Preflight thresholds: H200 defaults, overridable per site (``preflight.thresholds``).

Defaults come from the recorded H200 box (tests/fixtures/preflight/h200-x2, docs/BENCHMARKS.md):
idle 34-38 C, 700 W default limit, PCIe Gen5 x16, 18 NVLinks at 26.562 GB/s per GPU,
bf16 GEMM 8192^3 ~795 TFLOP/s, NVLink p2p 364 GB/s, all-reduce bus bandwidth 328 GB/s.
Active-test minimums sit ~20-25% below those measurements.
The site config checks override names against this table when it loads, so this module
sits in the site config layer (docs/architecture.md) and imports only the launcher base.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass

from launcher.typed_config import FieldError


@dataclass(frozen=True)
class Thresholds:
    """Every number a check compares against (site keys use these field names)."""

    gpu_temp_warn_c: float = 80.0
    """GPU core temperature that warns."""
    gpu_temp_fail_c: float = 87.0
    """GPU core temperature that fails (H200 slows down near 87-90 C)."""
    gpu_mem_temp_warn_c: float = 85.0
    """HBM temperature that warns."""
    gpu_mem_temp_fail_c: float = 95.0
    """HBM temperature that fails."""
    power_limit_min_ratio: float = 0.95
    """Enforced power limit / default limit below this fails (a capped GPU slows the job)."""
    ecc_volatile_uncorrectable_max: float = 0
    """Volatile uncorrectable ECC errors above this fail."""
    ecc_volatile_correctable_warn: float = 1000
    """Volatile correctable ECC errors above this warn."""
    ecc_aggregate_uncorrectable_warn: float = 0
    """Lifetime uncorrectable ECC errors above this warn."""
    remapped_rows_uncorrectable_warn: float = 16
    """Rows remapped for uncorrectable errors above this warn (spares running low)."""
    pcie_width_min: float = 16
    """PCIe lanes below this (or below the link's max) fail."""
    pcie_gen_min: float = 5
    """PCIe generation below this warns (idle GPUs may downshift)."""
    nvlink_links_min: float = 18
    """Active NVLinks per GPU below this fail (0: no NVLink expected)."""
    nvlink_speed_min_gbps: float = 26.0
    """Per-link NVLink speed below this fails."""
    nvlink_error_delta_warn: float = 0
    """Growth of any NVLink error counter since the last run above this warns."""
    nvlink_error_delta_fail: float = 100
    """Growth of any NVLink error counter since the last run above this fails."""
    xid_window_s: float = 86400
    """Xids older than this (kernel uptime) are ignored."""
    ib_ports_min: float = 0
    """InfiniBand/RoCE ports expected (0: none required, check skipped without HCAs)."""
    ib_rate_min_gbps: float = 0
    """Port rate below this fails (0: not checked)."""
    ib_link_downed_delta_max: float = 0
    """Growth of counters/link_downed since the last run above this fails (a flapping link)."""
    mem_available_min_ratio: float = 0.5
    """MemAvailable / MemTotal below this warns."""
    disk_free_gb_min: float = 10
    """Free space on each disk path below this fails (GB)."""
    disk_free_ratio_min: float = 0.02
    """Free fraction on each disk path below this fails."""
    gemm_tflops_min: float = 600
    """bf16 GEMM (8192^3) per GPU below this fails (H200 measured ~795)."""
    membw_gbps_min: float = 3000
    """Device copy bandwidth (read+write bytes) per GPU below this fails."""
    nccl_allreduce_busbw_gbps_min: float = 250
    """Single-node all-reduce bus bandwidth (1 GiB) below this fails (H200x2 measured 328)."""
    nccl_p2p_gbps_min: float = 280
    """GPU0->GPUi p2p bandwidth (1 GiB) below this fails (H200 NVLink measured 364)."""
    cpu_gemm_gflops_min: float = 0.5
    """CPU float64 GEMM below this fails (CPU-only sites)."""
    mpi_ping_us_max: float = 5000
    """Round trip between two local MPI ranks above this fails (CPU-only sites)."""
    tool_timeout_s: float = 10
    """Watchdog for each external tool (nvidia-smi, dmesg)."""
    active_timeout_s: float = 180
    """Watchdog for each active test."""


THRESHOLD_NAMES = tuple(f.name for f in dataclasses.fields(Thresholds))


def check_threshold_names(overrides: Mapping[str, float]) -> None:
    """Raise FieldError for an override that names no threshold."""
    for name in overrides:
        if name not in THRESHOLD_NAMES:
            raise FieldError(
                f"thresholds.{name}",
                f"unknown threshold (allowed: {', '.join(THRESHOLD_NAMES)})",
            )


def make_thresholds(overrides: Mapping[str, float]) -> Thresholds:
    """Defaults with the site's overrides applied (names already validated)."""
    check_threshold_names(overrides)
    return dataclasses.replace(Thresholds(), **{k: float(v) for k, v in overrides.items()})
