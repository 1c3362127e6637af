"""Host and network checks: memory, CPUs, disk space, mounts, InfiniBand/RoCE ports.

Pure functions over the collected facts, like the GPU checks.
"""

from __future__ import annotations

from collections.abc import Callable

from launcher.preflight.context import Expectations, NodeFacts, counter_deltas
from launcher.preflight.result import CheckResult, passed, skipped, token
from launcher.preflight.thresholds import Thresholds

HostCheck = Callable[[NodeFacts, Expectations, Thresholds], CheckResult]


def check_memory(facts: NodeFacts, exp: Expectations, th: Thresholds) -> CheckResult:
    """MemTotal covers the site's RealMemory (FAIL); MemAvailable ratio (WARN)."""
    cid, host = "host.memory", facts.host
    expected = (
        f"MemTotal >= {exp.real_memory_mb} MB, "
        f"MemAvailable >= {th.mem_available_min_ratio:g} x MemTotal"
    )
    evidence = "<proc>/meminfo"
    if host.error is not None or host.mem_total_mb is None:
        return CheckResult(
            cid,
            "FAIL",
            host.error or "MemTotal missing",
            expected,
            evidence,
            "check procfs",
            detail="unreadable",
        )
    observed = (
        f"MemTotal {host.mem_total_mb:.0f} MB, MemAvailable {host.mem_available_mb or 0:.0f} MB"
    )
    if host.mem_total_mb < exp.real_memory_mb:
        return CheckResult(
            cid,
            "FAIL",
            observed,
            expected,
            evidence,
            "a DIMM is missing or failed: check the BMC/SEL",
            detail="mem-total",
        )
    if (
        host.mem_available_mb is not None
        and host.mem_available_mb < th.mem_available_min_ratio * host.mem_total_mb
    ):
        return CheckResult(
            cid,
            "WARN",
            observed,
            expected,
            evidence,
            "look for leftover processes or a full tmpfs",
            detail="mem-available",
        )
    return passed(cid, observed, expected, evidence)


def check_cpus(facts: NodeFacts, exp: Expectations, th: Thresholds) -> CheckResult:
    """Logical CPUs at least the site's CPUs= per node."""
    cid, host = "host.cpus", facts.host
    expected = f">= {exp.cpus} logical CPUs"
    if host.cpu_count is None:
        return CheckResult(
            cid,
            "FAIL",
            host.error or "cpuinfo empty",
            expected,
            "<proc>/cpuinfo",
            "check procfs",
            detail="unreadable",
        )
    observed = f"{host.cpu_count} logical CPUs"
    if host.cpu_count < exp.cpus:
        return CheckResult(
            cid,
            "FAIL",
            observed,
            expected,
            "<proc>/cpuinfo",
            "CPUs offline or SMT off: check BIOS/kernel cmdline",
            detail="cpus",
        )
    return passed(cid, observed, expected, "<proc>/cpuinfo")


def check_disk(facts: NodeFacts, exp: Expectations, th: Thresholds) -> CheckResult:
    """Each disk path exists and has enough free space (absolute and relative)."""
    cid = "host.disk"
    if not facts.disks:
        return skipped(cid, "no disk paths configured (preflight.disk_paths)")
    expected = (
        f"free >= {th.disk_free_gb_min:g} GB and >= {th.disk_free_ratio_min:g} of size on each path"
    )
    bad, seen = [], []
    for d in facts.disks:
        if d.error is not None or d.free_gb is None or not d.total_gb:
            bad.append(d.error or f"{d.path}: unknown size")
            continue
        seen.append(f"{d.path} {d.free_gb:.1f}/{d.total_gb:.1f} GB free")
        if d.free_gb < th.disk_free_gb_min or d.free_gb < th.disk_free_ratio_min * d.total_gb:
            bad.append(f"{d.path}: {d.free_gb:.2f} GB free of {d.total_gb:.1f} GB")
    if bad:
        return CheckResult(
            cid,
            "FAIL",
            "; ".join(bad),
            expected,
            "statvfs",
            "clean up or enlarge the filesystem",
            detail=token("low-" + bad[0].split(":")[0].strip("/")),
        )
    return passed(cid, "; ".join(seen), expected, "statvfs")


def check_mounts(facts: NodeFacts, exp: Expectations, th: Thresholds) -> CheckResult:
    """Every required mount point is in the mount table."""
    cid = "host.mounts"
    if not exp.required_mounts:
        return skipped(cid, "no required mounts configured (preflight.required_mounts)")
    expected = "mounted: " + ", ".join(exp.required_mounts)
    mounted = set(facts.host.mounts)
    missing = [m for m in exp.required_mounts if (m.rstrip("/") or "/") not in mounted]
    if facts.host.error is not None:
        return CheckResult(
            cid,
            "FAIL",
            facts.host.error,
            expected,
            "<proc>/self/mounts",
            "check procfs",
            detail="unreadable",
        )
    if missing:
        return CheckResult(
            cid,
            "FAIL",
            "missing: " + ", ".join(missing),
            expected,
            "<proc>/self/mounts",
            "remount (check autofs/NFS/Lustre client)",
            detail=token("missing-" + missing[0].strip("/")),
        )
    return passed(cid, "all mounted", expected, "<proc>/self/mounts")


def check_ib_ports(facts: NodeFacts, exp: Expectations, th: Thresholds) -> CheckResult:
    """Every port ACTIVE/LinkUp at >= ib_rate_min_gbps; at least ib_ports_min ports."""
    cid, ports = "net.ib_ports", facts.ib_ports
    count = f">= {th.ib_ports_min:g} ports, each" if th.ib_ports_min > 0 else "every port"
    rate = f" at >= {th.ib_rate_min_gbps:g} Gb/s" if th.ib_rate_min_gbps > 0 else ""
    expected = f"{count} ACTIVE/LinkUp{rate}"
    evidence = "<sysfs>/class/infiniband/*/ports/*"
    if not ports and th.ib_ports_min <= 0:
        return skipped(cid, "no InfiniBand/RoCE ports on this node (ib_ports_min=0)")
    bad: list[tuple[str, str]] = []  # (finding, drain-reason detail)
    for p in ports:
        name = f"{p.device}/{p.port}"
        if p.state != "ACTIVE" or (p.phys_state is not None and p.phys_state != "LinkUp"):
            bad.append((f"{name}: {p.state}/{p.phys_state}", f"{name}-down"))
        elif th.ib_rate_min_gbps > 0 and (p.rate_gbps or 0) < th.ib_rate_min_gbps:
            bad.append((f"{name}: rate {p.rate_gbps} Gb/s", f"{name}-slow"))
    if len(ports) < th.ib_ports_min:
        bad.insert(0, (f"{len(ports)} ports found", f"{len(ports)}-ports"))
    if bad:
        return CheckResult(
            cid,
            "FAIL",
            "; ".join(finding for finding, _ in bad),
            expected,
            evidence,
            "check cable/transceiver and the switch port; ibstat",
            detail=token(bad[0][1]),
        )
    observed = "; ".join(
        f"{p.device}/{p.port} {p.state} {p.rate_gbps:g} Gb/s"
        if p.rate_gbps is not None
        else f"{p.device}/{p.port} {p.state}"
        for p in ports
    )
    return passed(cid, observed, expected, evidence)


def check_ib_link_downed(facts: NodeFacts, exp: Expectations, th: Thresholds) -> CheckResult:
    """counters/link_downed did not grow since the previous run (a flapping link)."""
    cid = "net.ib_link_downed"
    counted = [p for p in facts.ib_ports if p.link_downed is not None]
    if not counted:
        return skipped(cid, "no InfiniBand/RoCE link_downed counters")
    expected = f"link_downed growth <= {th.ib_link_downed_delta_max:g} since the previous run"
    evidence = "<sysfs>/class/infiniband/*/ports/*/counters/link_downed vs previous run"
    deltas = counter_deltas(facts, "ib/")
    if deltas is None:
        return passed(cid, "baseline recorded (first run this boot)", expected, evidence)
    grown = {k: d for k, d in deltas.items() if d > th.ib_link_downed_delta_max}
    if grown:
        items = [
            f"{k.removeprefix('ib/').removesuffix('/link_downed')} +{d}"
            for k, d in sorted(grown.items())
        ]
        return CheckResult(
            cid,
            "FAIL",
            "; ".join(items),
            expected,
            evidence,
            "the link flaps: replace cable/transceiver",
            detail=token(items[0].split(" ")[0] + "-flap"),
        )
    return passed(cid, f"no growth on {len(deltas)} ports", expected, evidence)


HOST_CHECKS: tuple[HostCheck, ...] = (
    check_memory,
    check_cpus,
    check_disk,
    check_mounts,
    check_ib_ports,
    check_ib_link_downed,
)
