"""Every check on the real H200 recording (passes) and on a derived fault (fails/warns).

Faults are injected the way users override tools: GANTRY_NVIDIA_SMI / GANTRY_DMESG point at
scripts printing recorded (or derived) outputs, GANTRY_SYSFS_ROOT / GANTRY_PROC_ROOT at trees.
"""

from __future__ import annotations

import dataclasses
import json
import shutil
import time
from pathlib import Path

import pytest

from launcher.preflight.context import Expectations
from launcher.preflight.thresholds import Thresholds
from launcher.preflight.verdict import verdict_from_json
from tests.unit.preflight_helpers import (
    FAULTS,
    H200_EXPECT,
    HEALTHY,
    HEALTHY_X1,
    by_id,
    gpu_env,
    make_ib_tree,
    make_proc_tree,
    run,
)


def test_one_gpu_vm_without_nvlink_passes() -> None:
    """The lent one-GPU H200 VM lists no NVLink (recorded): a node with one GPU has no peer on
    it, so the NVLink check skips instead of failing the node."""
    verdict = run(gpu_env(HEALTHY_X1), expect=dataclasses.replace(H200_EXPECT, gpus_per_node=1))
    statuses = by_id(verdict)
    assert statuses["gpu.nvlink"] == "SKIP"
    assert statuses["gpu.inventory"] == "PASS"
    assert verdict.status == "PASS", [c for c in verdict.checks if c.status not in ("PASS", "SKIP")]


def test_one_gpu_with_a_listed_link_down_still_fails(tmp_path: Path) -> None:
    smi = tmp_path / "smi"
    shutil.copytree(HEALTHY_X1, smi)
    links = "".join(f"\t Link {i}: 26.562 GB/s\n" for i in range(18)).replace(
        "Link 5: 26.562 GB/s", "Link 5: <inactive>")
    (smi / "nvlink-s.txt").write_text("GPU 0: NVIDIA H200 (UUID: x)\n" + links)
    verdict = run(gpu_env(smi), expect=dataclasses.replace(H200_EXPECT, gpus_per_node=1))
    nvlink = next(c for c in verdict.checks if c.id == "gpu.nvlink")
    assert nvlink.status == "FAIL"
    assert nvlink.observed == "GPU0: links [5] inactive (17/18 up)"


def test_one_gpu_listed_without_links_skips_too(tmp_path: Path) -> None:
    """nvidia-smi may print the GPU's header line and no link under it (a PCIe GPU)."""
    smi = tmp_path / "smi"
    shutil.copytree(HEALTHY_X1, smi)
    (smi / "nvlink-s.txt").write_text("GPU 0: NVIDIA H200 (UUID: x)\n")
    verdict = run(gpu_env(smi), expect=dataclasses.replace(H200_EXPECT, gpus_per_node=1))
    nvlink = next(c for c in verdict.checks if c.id == "gpu.nvlink")
    assert nvlink.status == "SKIP"
    assert "nvlink_links_min 18 not applied" in nvlink.reason


@pytest.mark.parametrize("gpus_per_node", [1, 2])
def test_two_gpus_that_list_no_link_fail(tmp_path: Path, gpus_per_node: int) -> None:
    """Two GPUs on the node and no NVLink listed: a lost NVLink fabric, never skipped."""
    smi = tmp_path / "smi"
    shutil.copytree(HEALTHY, smi)
    (smi / "nvlink-s.txt").write_text("")
    (smi / "nvlink-e.txt").write_text("")
    verdict = run(gpu_env(smi), expect=dataclasses.replace(H200_EXPECT,
                                                           gpus_per_node=gpus_per_node))
    assert by_id(verdict)["gpu.nvlink"] == "FAIL"


def test_two_gpus_expected_one_seen_without_nvlink_fails() -> None:
    verdict = run(gpu_env(HEALTHY_X1))  # the site expects 2 GPUs per node
    statuses = by_id(verdict)
    assert statuses["gpu.inventory"] == "FAIL"
    assert statuses["gpu.nvlink"] == "FAIL"


def test_healthy_h200_passes_every_gpu_check() -> None:
    verdict = run(gpu_env(HEALTHY))
    statuses = by_id(verdict)
    assert verdict.status == "PASS", [c for c in verdict.checks if c.status != "PASS"]
    for cid in (
        "gpu.inventory",
        "gpu.ecc",
        "gpu.row_remap",
        "gpu.xid",
        "gpu.nvlink",
        "gpu.nvlink_errors",
        "gpu.clocks",
        "gpu.temperature",
        "gpu.power",
        "gpu.pcie",
        "gpu.recovery",
        "host.memory",
        "host.cpus",
        "host.disk",
    ):
        assert statuses[cid] == "PASS", cid
    assert verdict.gpu_source == "nvidia-smi-xml"
    assert verdict.drain_reason() is None


# fault dir, failing check, status, detail in the drain reason
FAULT_TABLE = [
    ("remap-pending", "gpu.row_remap", "FAIL", "gpu1-pending"),
    ("remap-failure", "gpu.row_remap", "FAIL", "gpu1-failure"),
    ("ecc-dbe", "gpu.ecc", "FAIL", "gpu0-volatile-uncorrectable"),
    ("ecc-correctable", "gpu.ecc", "WARN", "ecc"),
    ("sram-threshold", "gpu.ecc", "FAIL", "gpu1-sram-threshold-exceeded"),
    ("nvlink-down", "gpu.nvlink", "FAIL", "gpu1-link-down"),
    ("nvlink-slow", "gpu.nvlink", "FAIL", "gpu1"),
    ("clocks-hw-slowdown", "gpu.clocks", "FAIL", "gpu1-hw_slowdown"),
    ("clocks-power-brake", "gpu.clocks", "FAIL", "gpu0-hw_power_brake_slowdown"),
    ("clocks-sw-thermal", "gpu.clocks", "WARN", "sw-thermal"),
    ("hot", "gpu.temperature", "FAIL", "gpu1-hot"),
    ("warm-hbm", "gpu.temperature", "WARN", "warm"),
    ("power-capped", "gpu.power", "FAIL", "gpu0-capped"),
    ("pcie-x8", "gpu.pcie", "FAIL", "gpu1-width"),
    ("pcie-gen3", "gpu.pcie", "WARN", "gen"),
    ("recovery-reset", "gpu.recovery", "FAIL", "gpu1-reset"),
    ("persistence-off", "gpu.recovery", "WARN", "persistence"),
    ("gpu-missing", "gpu.inventory", "FAIL", "count-1-of-2"),
    ("drift-old-names", "gpu.clocks", "FAIL", "gpu0-hw_slowdown"),
    ("not-xml-remap-pending", "gpu.row_remap", "FAIL", "gpu1-pending"),
    ("broken", "gpu.inventory", "FAIL", "no-gpu-facts"),
]


@pytest.mark.parametrize(
    ("fault", "check_id", "status", "detail"), FAULT_TABLE, ids=[f[0] for f in FAULT_TABLE]
)
def test_fault_is_caught(fault: str, check_id: str, status: str, detail: str) -> None:
    verdict = run(gpu_env(FAULTS / fault))
    result = next(c for c in verdict.checks if c.id == check_id)
    assert result.status == status, result
    assert detail in result.detail
    assert result.observed and result.expected and result.action
    others = [c for c in verdict.checks if c.id != check_id and c.status in ("FAIL", "WARN")]
    if fault not in ("gpu-missing", "broken"):
        assert others == [], others  # one edit, one finding
    if status == "FAIL":
        assert verdict.status == "FAIL"
        assert verdict.drain_reason() == f"gantry:{check_id}:{result.detail}"
    else:
        assert verdict.status == "WARN" and verdict.drain_reason() is None


def test_csv_fallback_when_xml_is_unusable() -> None:
    verdict = run(gpu_env(FAULTS / "not-xml"))
    assert verdict.gpu_source == "nvidia-smi-csv"
    assert verdict.status == "PASS", [c for c in verdict.checks if c.status != "PASS"]


def test_na_values_do_not_crash_or_fail() -> None:
    verdict = run(gpu_env(FAULTS / "na-values"))
    assert verdict.status == "PASS", [c for c in verdict.checks if c.status != "PASS"]
    temps = next(c for c in verdict.checks if c.id == "gpu.temperature")
    assert "n/a" in temps.observed


def test_hung_nvidia_smi_is_a_failure_within_the_watchdog() -> None:
    start = time.monotonic()
    verdict = run(gpu_env(FAULTS / "hang"), thresholds=Thresholds(tool_timeout_s=1.0))
    took = time.monotonic() - start
    inv = next(c for c in verdict.checks if c.id == "gpu.inventory")
    assert inv.status == "FAIL" and "did not answer" in inv.observed and inv.detail == "hung"
    assert took < 10
    assert by_id(verdict)["gpu.ecc"] == "SKIP"


@pytest.mark.parametrize(
    ("dmesg", "status", "detail"),
    [
        ("xid79.txt", "FAIL", "xid-79"),
        ("xid13.txt", "WARN", "xid"),
    ],
)
def test_xid(dmesg: str, status: str, detail: str) -> None:
    verdict = run(gpu_env(HEALTHY, dmesg=dmesg))
    xid = next(c for c in verdict.checks if c.id == "gpu.xid")
    assert xid.status == status and xid.detail == detail
    if dmesg == "xid79.txt":
        assert "(x2)" in xid.observed  # two lines, one (GPU, code) entry: de-duplicated


def test_xid_outside_window_is_ignored(tmp_path: Path) -> None:
    make_proc_tree(tmp_path, uptime=200_000.0)
    env = gpu_env(HEALTHY, dmesg="xid48-old.txt", GANTRY_PROC_ROOT=str(tmp_path))
    assert by_id(run(env))["gpu.xid"] == "PASS"
    make_proc_tree(tmp_path, uptime=1_000.0)
    assert by_id(run(env))["gpu.xid"] == "FAIL"


def test_unreadable_dmesg_skips_xid_with_reason() -> None:
    env = gpu_env(HEALTHY, GANTRY_DMESG="/nonexistent/dmesg")
    xid = next(c for c in run(env).checks if c.id == "gpu.xid")
    assert xid.status == "SKIP" and "kernel log not readable" in xid.reason


def test_nvlink_error_counter_growth(tmp_path: Path) -> None:
    make_proc_tree(tmp_path / "proc")
    state = tmp_path / "state"
    base_env = gpu_env(HEALTHY, GANTRY_PROC_ROOT=str(tmp_path / "proc"))
    first = run(base_env, state_dir=state)
    assert (
        "baseline recorded" in next(c for c in first.checks if c.id == "gpu.nvlink_errors").observed
    )
    grown = run(
        gpu_env(FAULTS / "nvlink-crc", GANTRY_PROC_ROOT=str(tmp_path / "proc")), state_dir=state
    )
    check = next(c for c in grown.checks if c.id == "gpu.nvlink_errors")
    assert check.status == "FAIL" and "+500" in check.observed
    # After a reboot the old counters are not compared.
    make_proc_tree(tmp_path / "proc", boot_id="boot-b")
    rebooted = run(
        gpu_env(FAULTS / "nvlink-crc", GANTRY_PROC_ROOT=str(tmp_path / "proc")), state_dir=state
    )
    assert by_id(rebooted)["gpu.nvlink_errors"] == "PASS"


def test_small_nvlink_growth_warns(tmp_path: Path) -> None:
    make_proc_tree(tmp_path / "proc")
    state = tmp_path / "state"
    env = gpu_env(HEALTHY, GANTRY_PROC_ROOT=str(tmp_path / "proc"))
    run(env, state_dir=state)
    verdict = run(
        gpu_env(FAULTS / "nvlink-crc", GANTRY_PROC_ROOT=str(tmp_path / "proc")),
        state_dir=state,
        thresholds=Thresholds(nvlink_error_delta_fail=1000),
    )
    assert by_id(verdict)["gpu.nvlink_errors"] == "WARN"


CPU_SITE = Expectations(
    gpus_per_node=0,
    cpus=2,
    real_memory_mb=1000,
    disk_paths=("/tmp",),
    required_mounts=("/scratch",),
)


def cpu_env(tmp_path: Path, **kw: object) -> dict[str, str]:
    make_proc_tree(tmp_path / "proc", **kw)  # type: ignore[arg-type]
    env = gpu_env(
        HEALTHY,
        GANTRY_PROC_ROOT=str(tmp_path / "proc"),
        GANTRY_SYSFS_ROOT=str(tmp_path / "sys"),
        GANTRY_NVIDIA_SMI="",
    )
    env["PATH"] = "/usr/bin:/bin"  # no nvidia-smi here
    env["GANTRY_GPU_SOURCE"] = "nvidia-smi"
    return env


def test_cpu_only_site_skips_gpu_checks_with_reason(tmp_path: Path) -> None:
    verdict = run(cpu_env(tmp_path), expect=CPU_SITE)
    assert verdict.status == "PASS"
    inv = next(c for c in verdict.checks if c.id == "gpu.inventory")
    assert inv.status == "SKIP" and "gpus_per_node=0" in inv.reason
    assert by_id(verdict)["host.mounts"] == "PASS"


def test_gpu_site_without_nvidia_smi_fails(tmp_path: Path) -> None:
    verdict = run(cpu_env(tmp_path))
    assert by_id(verdict)["gpu.inventory"] == "FAIL"


@pytest.mark.parametrize(
    ("proc", "check_id", "status"),
    [
        ({"mem_total_kb": 500_000}, "host.memory", "FAIL"),
        ({"mem_avail_kb": 1_000_000}, "host.memory", "WARN"),
        ({"cpus": 1}, "host.cpus", "FAIL"),
        ({"mounts": ("/",)}, "host.mounts", "FAIL"),
    ],
)
def test_host_faults(tmp_path: Path, proc: dict[str, object], check_id: str, status: str) -> None:
    verdict = run(cpu_env(tmp_path, **proc), expect=CPU_SITE)
    assert by_id(verdict)[check_id] == status
    assert [c.id for c in verdict.checks if c.status in ("WARN", "FAIL")] == [check_id]


def test_low_and_missing_disk(tmp_path: Path) -> None:
    env = cpu_env(tmp_path)
    low = run(env, expect=CPU_SITE, thresholds=Thresholds(disk_free_gb_min=1e9))
    disk = next(c for c in low.checks if c.id == "host.disk")
    assert disk.status == "FAIL" and "GB free of" in disk.observed
    missing = dataclasses.replace(CPU_SITE, disk_paths=(str(tmp_path / "no-such-dir"),))
    assert by_id(run(env, expect=missing))["host.disk"] == "FAIL"


def test_ib_ports(tmp_path: Path) -> None:
    good = {
        "state": "4: ACTIVE",
        "phys_state": "5: LinkUp",
        "rate": "400 Gb/sec (4X NDR)",
        "link_layer": "InfiniBand",
        "link_downed": "1",
    }
    make_ib_tree(tmp_path / "sys", {"mlx5_0/1": good, "mlx5_1/1": good})
    env = cpu_env(tmp_path)
    th = Thresholds(ib_ports_min=2, ib_rate_min_gbps=400)
    state = tmp_path / "state"
    ok = run(env, expect=CPU_SITE, thresholds=th, state_dir=state)
    assert by_id(ok)["net.ib_ports"] == "PASS" and by_id(ok)["net.ib_link_downed"] == "PASS"
    # link down on one port
    make_ib_tree(tmp_path / "sys", {"mlx5_1/1": {"state": "1: DOWN", "phys_state": "2: Polling"}})
    down = run(env, expect=CPU_SITE, thresholds=th, state_dir=state)
    port = next(c for c in down.checks if c.id == "net.ib_ports")
    assert port.status == "FAIL" and "mlx5_1/1: DOWN/Polling" in port.observed
    assert port.detail == "mlx5_1-1-down" and port.expected.startswith(">= 2 ports, each ACTIVE")
    # link_downed counter increase since the previous run (a flap)
    make_ib_tree(tmp_path / "sys", {"mlx5_1/1": {**good, "link_downed": "4"}})
    flap = run(env, expect=CPU_SITE, thresholds=th, state_dir=state)
    flapped = next(c for c in flap.checks if c.id == "net.ib_link_downed")
    assert flapped.status == "FAIL" and "mlx5_1/1 +3" in flapped.observed
    # slow port, and too few ports
    make_ib_tree(tmp_path / "sys", {"mlx5_1/1": {**good, "rate": "200 Gb/sec (4X HDR)"}})
    slow = next(c for c in run(env, expect=CPU_SITE, thresholds=th).checks
                if c.id == "net.ib_ports")
    assert slow.status == "FAIL" and slow.detail == "mlx5_1-1-slow"
    none = run(cpu_env(tmp_path / "empty"), expect=CPU_SITE, thresholds=th)
    few = next(c for c in none.checks if c.id == "net.ib_ports")
    assert few.status == "FAIL" and few.detail == "0-ports" and few.observed == "0 ports found"
    # no port count required: the expectation names no count
    any_count = Thresholds(ib_ports_min=0)
    make_ib_tree(tmp_path / "sys", {"mlx5_1/1": {"state": "1: DOWN", "phys_state": "2: Polling"}})
    uncounted = next(c for c in run(env, expect=CPU_SITE, thresholds=any_count).checks
                     if c.id == "net.ib_ports")
    assert uncounted.status == "FAIL" and uncounted.expected == "every port ACTIVE/LinkUp"


def test_verdict_json_round_trip() -> None:
    verdict = run(gpu_env(FAULTS / "remap-pending"))
    again = verdict_from_json(json.dumps(verdict.to_dict()), "test")
    assert again == verdict


def test_site_driver_and_model_expectations() -> None:
    exp = dataclasses.replace(H200_EXPECT, driver_version="999.0")
    assert by_id(run(gpu_env(HEALTHY), expect=exp))["gpu.inventory"] == "FAIL"
    exp = dataclasses.replace(H200_EXPECT, gpu_model="NVIDIA B200")
    assert by_id(run(gpu_env(HEALTHY), expect=exp))["gpu.inventory"] == "FAIL"
