"""Shared helpers for the preflight tests: fixture paths, env overrides, fake sysfs/procfs trees."""

from __future__ import annotations

import os
from pathlib import Path

from launcher.preflight.context import Expectations
from launcher.preflight.runner import RunOptions, run_preflight
from launcher.preflight.thresholds import Thresholds
from launcher.preflight.verdict import NodeVerdict

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "preflight"
HEALTHY = FIXTURES / "h200-x2"
HEALTHY_X1 = FIXTURES / "h200-x1"
"""Recorded on the one-GPU H200 VM: no NVLink listed."""
FAULTS = FIXTURES / "faults"
FAKE_SMI = FIXTURES / "fake-nvidia-smi"
FAKE_DMESG = FIXTURES / "fake-dmesg"
H200_EXPECT = Expectations(
    gpus_per_node=2,
    gpu_model="NVIDIA H200",
    cpus=1,
    real_memory_mb=1,
    disk_paths=("/tmp",),
    xid_actions={48: "reset", 63: "reset", 64: "drain", 74: "reset", 79: "drain", 94: "reset",
                 95: "reset"},
)


def gpu_env(smi_dir: Path, dmesg: str = "clean.txt", **extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        GANTRY_NVIDIA_SMI=str(FAKE_SMI),
        GANTRY_FAKE_SMI_DIR=str(smi_dir),
        GANTRY_DMESG=str(FAKE_DMESG),
        GANTRY_FAKE_DMESG_FILE=str(FIXTURES / "dmesg" / dmesg),
        GANTRY_NODE_NAME_UNUSED="",
    )
    env.pop("SLURMD_NODENAME", None)
    env.update(extra)
    return env


def run(
    env: dict[str, str],
    expect: Expectations = H200_EXPECT,
    thresholds: Thresholds | None = None,
    state_dir: Path | None = None,
    level: str = "quick",
) -> NodeVerdict:
    opts = RunOptions(
        level=level,  # type: ignore[arg-type]
        expectations=expect,
        thresholds=thresholds or Thresholds(),
        state_dir=state_dir,
        mpi_env={},
    )
    verdict, _ = run_preflight(opts, env)
    return verdict


def by_id(verdict: NodeVerdict) -> dict[str, str]:
    return {c.id: c.status for c in verdict.checks}


def make_ib_tree(root: Path, ports: dict[str, dict[str, str]]) -> None:
    """Fake sysfs: ports maps "mlx5_0/1" -> {state, phys_state, rate, link_layer, link_downed}."""
    for name, values in ports.items():
        device, port = name.split("/")
        base = root / "class" / "infiniband" / device / "ports" / port
        (base / "counters").mkdir(parents=True, exist_ok=True)
        for key in ("state", "phys_state", "rate", "link_layer"):
            if key in values:
                (base / key).write_text(values[key] + "\n")
        if "link_downed" in values:
            (base / "counters" / "link_downed").write_text(values["link_downed"] + "\n")


def make_proc_tree(
    root: Path,
    mem_total_kb: int = 32_000_000,
    mem_avail_kb: int = 30_000_000,
    cpus: int = 4,
    mounts: tuple[str, ...] = ("/", "/scratch"),
    boot_id: str = "boot-a",
    uptime: float = 10_000.0,
) -> None:
    """Fake procfs with meminfo, cpuinfo, self/mounts, uptime and boot id."""
    (root / "self").mkdir(parents=True, exist_ok=True)
    (root / "sys/kernel/random").mkdir(parents=True, exist_ok=True)
    (root / "meminfo").write_text(
        f"MemTotal:       {mem_total_kb} kB\nMemFree:        1000 kB\n"
        f"MemAvailable:   {mem_avail_kb} kB\n"
    )
    (root / "cpuinfo").write_text(
        "".join(f"processor\t: {i}\nmodel name\t: Fake CPU\n\n" for i in range(cpus))
    )
    (root / "self/mounts").write_text(
        "".join(
            f"/dev/vda{i} {m.replace(' ', chr(92) + '040')} ext4 rw 0 0\n"
            for i, m in enumerate(mounts)
        )
    )
    (root / "uptime").write_text(f"{uptime} 100.0\n")
    (root / "sys/kernel/random/boot_id").write_text(boot_id + "\n")
