"""One health sample of a node while it trains, and what changed since the first one.

A sample is what preflight's collectors return (launcher/preflight/gpu_collect.py,
kernel_log.py, ib_ports.py, with the same tool-path overrides): the GPUs (only when the
node has GPU tooling or the site expects GPUs, as in preflight), the kernel log's Xid lines
and the InfiniBand ports. :func:`compare` is pure: it holds the current sample against the
first one of the run (counters must not rise, links must not fall) and the previous one
(a slowdown must last two samples to fail), and returns findings graded WARN or FAIL:

- ``gpu.xid``: an Xid line not in the first sample, graded by the Xid table
  (launcher/preflight/xid_actions.py: drain/reset FAIL, warn WARN, ignore nothing);
- ``gpu.inventory``: a GPU of the first sample gone (fallen off the bus) FAIL; the tool
  failing WARN, FAIL when it fails twice running;
- ``gpu.ecc``: volatile uncorrectable errors rising, SRAM threshold, repair pending FAIL;
  correctable errors rising WARN;
- ``gpu.row_remap``: remapped uncorrectable rows rising, a remap pending or failed FAIL;
- ``gpu.nvlink``: a link that was up is down FAIL; ``gpu.nvlink_errors``: a replay, recovery
  or CRC counter risen by more than ``nvlink_error_delta_fail`` FAIL (``_warn``: WARN);
- ``gpu.clocks``: HW slowdown, HW thermal slowdown or HW power brake WARN, FAIL when active
  in two samples running; SW thermal slowdown WARN;
- ``net.ib_link_downed``: a port's link_downed risen by more than ``ib_link_downed_delta_max``
  FAIL; ``net.ib_ports``: a port that was ACTIVE is not, or its rate dropped, FAIL.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

from launcher.preflight.facts import GpuFacts, GpuInventory, IbPort, KernelLog, XidEvent
from launcher.preflight.gpu_collect import choose_source, collect_gpus
from launcher.preflight.ib_ports import collect_ib_ports
from launcher.preflight.kernel_log import collect_kernel_log
from launcher.preflight.thresholds import Thresholds
from launcher.preflight.xid_actions import FAILING, action_of


@dataclass(frozen=True)
class Sample:
    """What one sample collected."""

    time: float
    gpu: GpuInventory | None
    """None: GPU collection is off on this node (no tooling, the site expects no GPU)."""
    kernel: KernelLog | None
    """None: off with the GPUs (Xids are GPU events)."""
    ib_ports: tuple[IbPort, ...]


@dataclass(frozen=True)
class Finding:
    """One thing the monitor saw."""

    check: str
    grade: str
    """WARN or FAIL."""
    observed: str
    expected: str
    word: str
    """A short word for the drain reason (``xid-79``, ``gpu1-rows``, ``mlx5_0-1-flap``)."""
    key: str
    """What it is about (one event per key and observation is written)."""


def gpus_watched(expected_gpus: int, env: Mapping[str, str] | None = None) -> bool:
    """Whether this node's GPUs are sampled: it has GPU tooling (an override counts) or the
    site expects GPUs (nodes.gpus_per_node), as preflight decides."""
    return expected_gpus > 0 or choose_source(env) != "none"


def take_sample(now: float, gpus: bool, tool_timeout_s: float,
                env: Mapping[str, str] | None = None) -> Sample:
    """Collect once through preflight's collectors."""
    environ = os.environ if env is None else env
    return Sample(time=now,
                  gpu=collect_gpus(tool_timeout_s, environ) if gpus else None,
                  kernel=collect_kernel_log(tool_timeout_s, environ) if gpus else None,
                  ib_ports=tuple(collect_ib_ports(environ)))


def _gpu_id(g: GpuFacts) -> str:
    return g.uuid or g.bus_id


def _xid_id(ev: XidEvent) -> tuple[str, int, float | None, str]:
    return (ev.pci, ev.code, ev.uptime_s, ev.text)


def _xids(first: Sample, now: Sample, table: Mapping[int, str]) -> list[Finding]:
    if now.kernel is None or now.kernel.error is not None:
        return []
    before = {_xid_id(e) for e in (first.kernel.events if first.kernel else ())}
    found = []
    for ev in now.kernel.events:
        action = action_of(table, ev.code)
        if _xid_id(ev) in before or action == "ignore":
            continue
        grade = "FAIL" if action in FAILING else "WARN"
        found.append(Finding(
            "gpu.xid", grade, f"Xid {ev.code} on {ev.pci}: {ev.text[:200]}",
            f"no new Xid whose action is drain or reset (Xid {ev.code}: {action})",
            f"xid-{ev.code}", f"gpu.xid/{ev.pci}/{ev.code}/{ev.uptime_s}/{ev.text}"))
    return found


def _inventory(first: Sample, previous: Sample, now: Sample) -> list[Finding]:
    if first.gpu is None or now.gpu is None or first.gpu.error is not None:
        return []
    if now.gpu.error is not None:
        twice = previous is not now and previous.gpu is not None and \
            previous.gpu.error is not None
        return [Finding("gpu.inventory", "FAIL" if twice else "WARN", now.gpu.error,
                        f"{len(first.gpu.gpus)} GPUs answering, as at the first sample",
                        "gpu-tool", "gpu.inventory/error")]
    seen = {_gpu_id(g) for g in now.gpu.gpus}
    gone = [g for g in first.gpu.gpus if _gpu_id(g) not in seen]
    if not gone:
        return []
    names = ", ".join(f"GPU{g.index} ({g.bus_id})" for g in gone)
    return [Finding("gpu.inventory", "FAIL",
                    f"{len(now.gpu.gpus)} of {len(first.gpu.gpus)} GPUs: {names} gone",
                    f"the first sample's {len(first.gpu.gpus)} GPUs (none fallen off the bus)",
                    f"gpu{gone[0].index}-gone", "gpu.inventory/gone")]


def _rose(before: int | None, after: int | None) -> int:
    return (after or 0) - (before or 0) if after is not None else 0


def _memory(first: Sample, now: Sample) -> list[Finding]:
    if first.gpu is None or now.gpu is None:
        return []
    start = {_gpu_id(g): g for g in first.gpu.gpus}
    found = []
    for g in now.gpu.gpus:
        f = start.get(_gpu_id(g))
        if f is None:
            continue
        name = f"GPU{g.index}"
        unc = _rose(f.ecc_volatile_uncorrectable, g.ecc_volatile_uncorrectable)
        if unc > 0:
            count = g.ecc_volatile_uncorrectable
            found.append(Finding("gpu.ecc", "FAIL",
                                 f"{name}: volatile uncorrectable {count} (+{unc})",
                                 "no new uncorrectable ECC error",
                                 f"{name.lower()}-ecc", f"gpu.ecc/{name}/unc/{count}"))
        for flag, what in ((g.sram_threshold_exceeded, "SRAM threshold exceeded"),
                           (g.repair_pending, "channel/TPC repair pending"),
                           (g.unrepairable_memory, "unrepairable memory")):
            if flag:
                found.append(Finding("gpu.ecc", "FAIL", f"{name}: {what}",
                                     "no SRAM threshold, pending repair or unrepairable memory",
                                     f"{name.lower()}-ecc", f"gpu.ecc/{name}/{what}"))
        cor = _rose(f.ecc_volatile_correctable, g.ecc_volatile_correctable)
        if cor > 0:
            found.append(Finding("gpu.ecc", "WARN",
                                 f"{name}: volatile correctable {g.ecc_volatile_correctable}"
                                 f" (+{cor})", "correctable ECC errors not rising",
                                 f"{name.lower()}-ecc-corr",
                                 f"gpu.ecc/{name}/cor/{g.ecc_volatile_correctable}"))
        rows = _rose(f.remapped_rows_uncorrectable, g.remapped_rows_uncorrectable)
        if rows > 0:
            found.append(Finding("gpu.row_remap", "FAIL",
                                 f"{name}: remapped uncorrectable rows "
                                 f"{g.remapped_rows_uncorrectable} (+{rows})",
                                 f"remapped rows as at the first sample "
                                 f"({f.remapped_rows_uncorrectable or 0})",
                                 f"{name.lower()}-rows",
                                 f"gpu.row_remap/{name}/{g.remapped_rows_uncorrectable}"))
        for flag, what in ((g.remap_pending, "remap pending"), (g.remap_failure, "remap failure")):
            if flag:
                found.append(Finding("gpu.row_remap", "FAIL", f"{name}: {what}",
                                     "no pending or failed row remap",
                                     f"{name.lower()}-{what.split()[1]}",
                                     f"gpu.row_remap/{name}/{what}"))
    return found


def _nvlink(first: Sample, now: Sample, th: Thresholds) -> list[Finding]:
    if first.gpu is None or now.gpu is None:
        return []
    start = {nv.gpu_index: nv for nv in first.gpu.nvlinks}
    found = []
    for nv in now.gpu.nvlinks:
        f = start.get(nv.gpu_index)
        if f is None:
            continue
        down = sorted(k for k, up in nv.link_active.items() if not up and f.link_active.get(k))
        if down:
            found.append(Finding("gpu.nvlink", "FAIL", f"GPU{nv.gpu_index}: links {down} down",
                                 "every link up at the first sample still up",
                                 f"gpu{nv.gpu_index}-link-down",
                                 f"gpu.nvlink/{nv.gpu_index}/{down}"))
        for link, counters in nv.errors.items():
            for name, value in counters.items():
                grown = value - f.errors.get(link, {}).get(name, value)
                if grown <= th.nvlink_error_delta_warn:
                    continue
                grade = "FAIL" if grown > th.nvlink_error_delta_fail else "WARN"
                found.append(Finding(
                    "gpu.nvlink_errors", grade,
                    f"GPU{nv.gpu_index} link {link} {name} {value} (+{grown})",
                    f"growth <= {th.nvlink_error_delta_warn:g} (warn), "
                    f"<= {th.nvlink_error_delta_fail:g} (fail) since the first sample",
                    f"gpu{nv.gpu_index}-nvlink-errors",
                    f"gpu.nvlink_errors/{nv.gpu_index}/{link}/{name}/{grade}"))
    return found


_HW_EVENTS = ("hw_slowdown", "hw_thermal_slowdown", "hw_power_brake_slowdown")


def _clocks(previous: Sample, now: Sample) -> list[Finding]:
    if now.gpu is None:
        return []
    before = {g.index: g for g in (previous.gpu.gpus if previous.gpu and previous is not now
                                   else ())}
    found = []
    for g in now.gpu.gpus:
        hw = [e for e in _HW_EVENTS if g.clock_events.get(e)]
        last = before.get(g.index)
        lasting = [e for e in hw if last is not None and last.clock_events.get(e)]
        if hw:
            grade = "FAIL" if lasting else "WARN"
            found.append(Finding("gpu.clocks", grade,
                                 f"GPU{g.index}: {', '.join(hw)} active"
                                 + (" (two samples running)" if lasting else ""),
                                 "no HW slowdown, HW thermal slowdown or HW power brake "
                                 "(FAIL when it lasts two samples)",
                                 f"gpu{g.index}-{hw[0].replace('_', '-')}",
                                 f"gpu.clocks/{g.index}/{grade}"))
        if g.clock_events.get("sw_thermal_slowdown"):
            found.append(Finding("gpu.clocks", "WARN", f"GPU{g.index}: sw_thermal_slowdown active",
                                 "no SW thermal slowdown", f"gpu{g.index}-sw-thermal",
                                 f"gpu.clocks/{g.index}/sw"))
    return found


def _ib(first: Sample, now: Sample, th: Thresholds) -> list[Finding]:
    start = {(p.device, p.port): p for p in first.ib_ports}
    found = []
    for p in now.ib_ports:
        f = start.get((p.device, p.port))
        if f is None:
            continue
        name = f"{p.device}/{p.port}"
        grown = _rose(f.link_downed, p.link_downed) if f.link_downed is not None else 0
        if grown > th.ib_link_downed_delta_max:
            found.append(Finding("net.ib_link_downed", "FAIL",
                                 f"{name}: link_downed {p.link_downed} (+{grown})",
                                 f"link_downed growth <= {th.ib_link_downed_delta_max:g} since "
                                 "the first sample", f"{p.device}-{p.port}-flap",
                                 f"net.ib_link_downed/{name}/{p.link_downed}"))
        if f.state == "ACTIVE" and p.state != "ACTIVE":
            found.append(Finding("net.ib_ports", "FAIL", f"{name}: {p.state}/{p.phys_state}",
                                 "ACTIVE, as at the first sample", f"{p.device}-{p.port}-down",
                                 f"net.ib_ports/{name}/state/{p.state}"))
        elif (f.rate_gbps is not None and p.rate_gbps is not None
              and p.rate_gbps < f.rate_gbps):
            found.append(Finding("net.ib_ports", "FAIL", f"{name}: rate {p.rate_gbps:g} Gb/s",
                                 f"{f.rate_gbps:g} Gb/s, as at the first sample",
                                 f"{p.device}-{p.port}-slow",
                                 f"net.ib_ports/{name}/rate/{p.rate_gbps}"))
    return found


def compare(first: Sample, previous: Sample, now: Sample, table: Mapping[int, str],
            th: Thresholds) -> list[Finding]:
    """Everything ``now`` shows against the run's ``first`` sample and the ``previous`` one
    (see the module docstring)."""
    return [*_xids(first, now, table), *_inventory(first, previous, now),
            *_memory(first, now), *_nvlink(first, now, th), *_clocks(previous, now),
            *_ib(first, now, th)]


def describe(sample: Sample) -> str:
    """One line: what the monitor watches on this node."""
    parts = []
    if sample.gpu is None:
        parts.append("GPUs off (no GPU tooling, none expected)")
    elif sample.gpu.error is not None:
        parts.append(f"GPUs unreadable ({sample.gpu.error[:120]})")
    else:
        parts.append(f"{len(sample.gpu.gpus)} GPUs ({sample.gpu.source})")
    if sample.kernel is not None:
        parts.append(f"kernel log {'unreadable' if sample.kernel.error else 'readable'}"
                     f" ({len(sample.kernel.events)} Xid lines)")
    parts.append(f"{len(sample.ib_ports)} IB ports")
    return ", ".join(parts)
