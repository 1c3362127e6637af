"""GPU checks: pure functions over the collected GPU facts, the site's expectations and thresholds.

Each returns one CheckResult covering all GPUs of the node; a failing result names the
GPUs and values (observed) next to the rule (expected).
"""

from __future__ import annotations

from collections.abc import Callable

from launcher.preflight.context import Expectations, NodeFacts, counter_deltas
from launcher.preflight.facts import GpuFacts
from launcher.preflight.result import CheckResult, passed, skipped, token
from launcher.preflight.thresholds import Thresholds
from launcher.preflight.xid_actions import FAILING, action_of, failing_codes

GpuCheck = Callable[[NodeFacts, Expectations, Thresholds], CheckResult]


def _na(value: object) -> str:
    return "n/a" if value is None else str(value)


def gpu_skip(check_id: str, facts: NodeFacts, exp: Expectations) -> CheckResult | None:
    """SKIP when no GPU is expected and none found, or when the inventory itself failed."""
    inv = facts.gpu
    if not inv.gpus and exp.gpus_per_node == 0:
        return skipped(check_id, "no GPU on this node or site (nodes.gpus_per_node=0)")
    if inv.error is not None or not inv.gpus:
        return skipped(check_id, "no GPU facts (see gpu.inventory)")
    return None


def _fail(
    check_id: str,
    bad: list[str],
    expected: str,
    evidence: str,
    action: str,
    detail: str,
    status: str = "FAIL",
) -> CheckResult:
    return CheckResult(
        check_id,
        "FAIL" if status == "FAIL" else "WARN",
        "; ".join(bad),
        expected,
        evidence,
        action,
        detail=token(detail),
    )


def _gpu_of(line: str) -> str:
    """The "GPU<n>" a finding line starts with ("GPU1: remap pending=Yes" -> "GPU1")."""
    return line.split(":")[0]


def _conclude(
    cid: str,
    expected: str,
    evidence: str,
    *,
    fails: list[str],
    fail_action: str,
    fail_detail: Callable[[str], str],
    warns: list[str] | None = None,
    warn_action: str = "",
    warn_detail: str = "",
    ok: str,
) -> CheckResult:
    """FAIL listing every failure (its drain detail made from the first), else WARN listing every
    warning, else PASS observing ``ok``: the last step of the per-GPU checks."""
    if fails:
        return _fail(cid, fails, expected, evidence, fail_action, fail_detail(fails[0]))
    if warns:
        return _fail(cid, warns, expected, evidence, warn_action, warn_detail, status="WARN")
    return passed(cid, ok, expected, evidence)


def check_inventory(facts: NodeFacts, exp: Expectations, th: Thresholds) -> CheckResult:
    """GPU count, model and driver against the site (and consistent across GPUs)."""
    cid, inv = "gpu.inventory", facts.gpu
    if not inv.gpus and exp.gpus_per_node == 0:
        return skipped(cid, "no GPU on this node or site (nodes.gpus_per_node=0)")
    expected = f"{exp.gpus_per_node} x {exp.gpu_model or 'any model'}" + (
        f", driver {exp.driver_version}" if exp.driver_version else ", one driver version"
    )
    if inv.error is not None:
        return CheckResult(
            cid,
            "FAIL",
            inv.error,
            expected,
            inv.evidence or inv.source,
            "check the driver and nvidia-smi on this node (a hung tool needs a reboot)",
            detail=token("hung" if "did not answer" in inv.error else "no-gpu-facts"),
        )
    names = sorted({g.name or "?" for g in inv.gpus})
    drivers = sorted({g.driver_version or inv.driver_version or "?" for g in inv.gpus})
    observed = f"{len(inv.gpus)} x {', '.join(names)}, driver {', '.join(drivers)}"
    problems = []
    if exp.gpus_per_node and len(inv.gpus) != exp.gpus_per_node:
        problems.append(f"count-{len(inv.gpus)}-of-{exp.gpus_per_node}")
    if exp.gpu_model and any(g.name != exp.gpu_model for g in inv.gpus):
        problems.append("model")
    if len(drivers) > 1 or (exp.driver_version and drivers != [exp.driver_version]):
        problems.append("driver")
    if problems:
        return CheckResult(
            cid,
            "FAIL",
            observed,
            expected,
            inv.evidence,
            "a missing GPU has fallen off the bus or is hidden: reset or reboot, then RMA",
            detail=token("-".join(problems)),
        )
    if not exp.gpus_per_node:
        return CheckResult(
            cid,
            "WARN",
            observed,
            "site expects no GPUs (nodes.gpus_per_node=0)",
            inv.evidence,
            "set nodes.gpus_per_node in the site config",
        )
    return passed(cid, observed, expected, inv.evidence)


def check_ecc(facts: NodeFacts, exp: Expectations, th: Thresholds) -> CheckResult:
    """Volatile uncorrectable ECC errors, SRAM threshold, pending repairs; correctable warn."""
    cid = "gpu.ecc"
    if (skip := gpu_skip(cid, facts, exp)) is not None:
        return skip
    fails, warns = [], []
    for g in facts.gpu.gpus:
        name = f"GPU{g.index}"
        if g.ecc_enabled is False:
            warns.append(f"{name}: ECC disabled")
        if (g.ecc_volatile_uncorrectable or 0) > th.ecc_volatile_uncorrectable_max:
            fails.append(f"{name}: volatile uncorrectable={g.ecc_volatile_uncorrectable}")
        if g.sram_threshold_exceeded:
            fails.append(f"{name}: SRAM threshold exceeded")
        if g.repair_pending:
            fails.append(f"{name}: channel/TPC repair pending")
        if g.unrepairable_memory:
            fails.append(f"{name}: unrepairable memory")
        if (g.ecc_volatile_correctable or 0) > th.ecc_volatile_correctable_warn:
            warns.append(f"{name}: volatile correctable={g.ecc_volatile_correctable}")
        if (g.ecc_aggregate_uncorrectable or 0) > th.ecc_aggregate_uncorrectable_warn:
            warns.append(f"{name}: aggregate uncorrectable={g.ecc_aggregate_uncorrectable}")
    expected = (
        f"volatile uncorrectable <= {th.ecc_volatile_uncorrectable_max:g}, no SRAM threshold, "
        f"no pending repair; correctable <= {th.ecc_volatile_correctable_warn:g}"
    )
    return _conclude(
        cid,
        expected,
        facts.gpu.evidence + " (ecc_errors)",
        fails=fails,
        fail_action="reset the GPU (nvidia-smi -r) or reboot; RMA if it recurs",
        fail_detail=lambda first: _gpu_of(first) + "-" + first.split(": ")[1].split("=")[0],
        warns=warns,
        warn_action="watch the counters; schedule a reset",
        warn_detail="ecc",
        ok=f"{len(facts.gpu.gpus)} GPUs: no uncorrectable errors",
    )


def check_row_remap(facts: NodeFacts, exp: Expectations, th: Thresholds) -> CheckResult:
    """Row remapping pending (needs reset) or failed (RMA); many remapped rows warn."""
    cid = "gpu.row_remap"
    if (skip := gpu_skip(cid, facts, exp)) is not None:
        return skip
    fails, warns = [], []
    for g in facts.gpu.gpus:
        if g.remap_pending:
            fails.append(f"GPU{g.index}: remap pending=Yes")
        if g.remap_failure:
            fails.append(f"GPU{g.index}: remap failure=Yes")
        if (g.remapped_rows_uncorrectable or 0) > th.remapped_rows_uncorrectable_warn:
            warns.append(
                f"GPU{g.index}: remapped uncorrectable rows={g.remapped_rows_uncorrectable}"
            )
    expected = (
        "pending=No, failure=No, remapped uncorrectable rows <= "
        f"{th.remapped_rows_uncorrectable_warn:g}"
    )
    pending_first = bool(fails) and "pending" in fails[0]
    return _conclude(
        cid,
        expected,
        facts.gpu.evidence + " (remapped_rows)",
        fails=fails,
        fail_action=(
            "reset the GPU (nvidia-smi -r) or reboot so the remap takes effect"
            if pending_first
            else "RMA the GPU: it is out of spare rows"
        ),
        fail_detail=lambda first: f"{_gpu_of(first)}-{'pending' if pending_first else 'failure'}",
        warns=warns,
        warn_action="plan an RMA: spare rows running out",
        warn_detail="rows",
        ok="no pending or failed remaps",
    )


def check_xid(facts: NodeFacts, exp: Expectations, th: Thresholds) -> CheckResult:
    """Xids within the window, de-duplicated per (boot, GPU, code), acted on per code
    (launcher/preflight/xid_actions.py): drain and reset fail, warn warns, ignore is not
    reported."""
    cid, log = "gpu.xid", facts.kernel
    if not facts.gpu.gpus and exp.gpus_per_node == 0:
        return skipped(cid, "no GPU on this node or site (nodes.gpus_per_node=0)")
    if log.error is not None:
        return skipped(cid, f"kernel log not readable: {log.error}")
    uptime = log.uptime_s
    seen: dict[tuple[str, int], int] = {}
    for ev in log.events:
        if (
            uptime is not None
            and ev.uptime_s is not None
            and uptime - ev.uptime_s > th.xid_window_s
        ):
            continue
        if action_of(exp.xid_actions, ev.code) == "ignore":
            continue
        seen[(ev.pci, ev.code)] = seen.get((ev.pci, ev.code), 0) + 1
    expected = (f"no Xid in {failing_codes(exp.xid_actions)} (preflight.xid_actions: drain, "
                f"reset) within {th.xid_window_s:g} s")
    evidence = f"dmesg (boot {log.boot_id or '?'})"
    if not seen:
        return passed(cid, "no Xid in window", expected, evidence)
    items = [f"Xid {code} on {pci} (x{n})" for (pci, code), n in sorted(seen.items())]
    critical = sorted({code for (_, code) in seen
                       if action_of(exp.xid_actions, code) in FAILING})
    if critical:
        drain = [c for c in critical if action_of(exp.xid_actions, c) == "drain"]
        action = ("reboot the node; RMA the GPU if it recurs (see NVIDIA's Xid catalog)"
                  if drain else "reset the GPU (nvidia-smi -r) or reboot before the next job; "
                  "RMA if it recurs")
        return _fail(cid, items, expected, evidence, action,
                     f"xid-{(drain or critical)[0]}")
    return _fail(
        cid,
        items,
        expected,
        evidence,
        "application-level Xids: check the last job's logs",
        "xid",
        status="WARN",
    )


def check_nvlink(facts: NodeFacts, exp: Expectations, th: Thresholds) -> CheckResult:
    """Every NVLink up, at least nvlink_links_min per GPU, each at full speed."""
    cid, inv = "gpu.nvlink", facts.gpu
    if (skip := gpu_skip(cid, facts, exp)) is not None:
        return skip
    expected = (
        f">= {th.nvlink_links_min:g} active links per GPU, none inactive, "
        f">= {th.nvlink_speed_min_gbps:g} GB/s each"
    )
    if th.nvlink_links_min <= 0 and not inv.nvlinks:
        return skipped(cid, "no NVLink expected (nvlink_links_min=0)")
    listed = any(nv.link_active for nv in inv.nvlinks)
    if not listed and inv.nvlink_error is None and len(inv.gpus) == 1 \
            and exp.gpus_per_node <= 1:
        # A one-GPU node (or a one-GPU slice of an NVLink system, as a VM) lists no links:
        # there is no peer on the node for NVLink to reach. Links that are listed are checked.
        return skipped(cid, "one GPU per node and no NVLink listed: no peer on the node "
                       f"(nvlink_links_min {th.nvlink_links_min:g} not applied)")
    if inv.nvlink_error is not None and not inv.nvlinks:
        return CheckResult(
            cid,
            "FAIL",
            inv.nvlink_error,
            expected,
            inv.evidence,
            "check nvidia-smi nvlink on this node",
            detail="unreadable",
        )
    by_gpu = {nv.gpu_index: nv for nv in inv.nvlinks}
    bad = []
    for g in inv.gpus:
        nv = by_gpu.get(g.index)
        links = nv.link_active if nv else {}
        down = sorted(k for k, up in links.items() if not up)
        active = len(links) - len(down)
        slow = sorted(
            k for k, s in (nv.link_speed_gbps if nv else {}).items() if s < th.nvlink_speed_min_gbps
        )
        if down:
            bad.append(f"GPU{g.index}: links {down} inactive ({active}/{len(links)} up)")
        elif active < th.nvlink_links_min:
            bad.append(f"GPU{g.index}: {active} active links")
        if slow:
            bad.append(f"GPU{g.index}: links {slow} below {th.nvlink_speed_min_gbps:g} GB/s")
    if bad:
        return _fail(
            cid,
            bad,
            expected,
            inv.evidence,
            "reseat/reset: a degraded NVLink slows every collective; reboot, then RMA",
            _gpu_of(bad[0]) + "-link-down",
        )
    total = sum(sum(nv.link_active.values()) for nv in inv.nvlinks)
    return passed(cid, f"{total} links active on {len(inv.gpus)} GPUs", expected, inv.evidence)


def check_nvlink_errors(facts: NodeFacts, exp: Expectations, th: Thresholds) -> CheckResult:
    """Growth of NVLink replay/recovery/CRC counters since the previous run (same boot)."""
    cid = "gpu.nvlink_errors"
    if (skip := gpu_skip(cid, facts, exp)) is not None:
        return skip
    if not facts.gpu.nvlinks:
        return skipped(cid, "no NVLink counters reported")
    expected = (
        f"counter growth <= {th.nvlink_error_delta_warn:g} (warn), "
        f"<= {th.nvlink_error_delta_fail:g} (fail)"
    )
    deltas = counter_deltas(facts, "nvlink/")
    evidence = facts.gpu.evidence + " (nvlink -e) vs previous run"
    if deltas is None:
        return passed(cid, "baseline recorded (first run this boot)", expected, evidence)
    grown = {k: d for k, d in deltas.items() if d > th.nvlink_error_delta_warn}
    if not grown:
        return passed(cid, f"no growth on {len(deltas)} counters", expected, evidence)
    items = [f"{k} +{d}" for k, d in sorted(grown.items(), key=lambda kv: -kv[1])]
    if max(grown.values()) > th.nvlink_error_delta_fail:
        return _fail(
            cid,
            items,
            expected,
            evidence,
            "a link is erroring: reset the GPU / reseat; RMA if it recurs",
            "counters-growing",
        )
    return _fail(cid, items, expected, evidence, "watch the link", "counters", status="WARN")


_HW_EVENTS = ("hw_slowdown", "hw_thermal_slowdown", "hw_power_brake_slowdown")


def check_clocks(facts: NodeFacts, exp: Expectations, th: Thresholds) -> CheckResult:
    """Clock-event reasons: HW slowdown/thermal/power brake fail, SW thermal warns."""
    cid = "gpu.clocks"
    if (skip := gpu_skip(cid, facts, exp)) is not None:
        return skip
    fails, warns = [], []
    for g in facts.gpu.gpus:
        hw = [e for e in _HW_EVENTS if g.clock_events.get(e)]
        if hw:
            fails.append(f"GPU{g.index}: {', '.join(hw)} active")
        if g.clock_events.get("sw_thermal_slowdown"):
            warns.append(f"GPU{g.index}: sw_thermal_slowdown active")
    expected = "no HW slowdown, HW thermal slowdown, HW power brake; no SW thermal slowdown"
    return _conclude(
        cid,
        expected,
        facts.gpu.evidence + " (clocks_event_reasons)",
        fails=fails,
        fail_action="check cooling and power delivery (PSU, power brake signal)",
        fail_detail=lambda first: (
            _gpu_of(first) + "-" + first.split(": ")[1].split(",")[0].replace(" active", "")
        ),
        warns=warns,
        warn_action="check airflow",
        warn_detail="sw-thermal",
        ok="no HW clock events active",
    )


def check_temperature(facts: NodeFacts, exp: Expectations, th: Thresholds) -> CheckResult:
    """GPU core and HBM temperatures against warn/fail limits."""
    cid = "gpu.temperature"
    if (skip := gpu_skip(cid, facts, exp)) is not None:
        return skip
    fails, warns, seen = [], [], []
    for g in facts.gpu.gpus:
        seen.append(f"GPU{g.index} {_na(g.temperature_c)}/{_na(g.memory_temperature_c)} C")
        for label, value, warn, fail in (
            ("core", g.temperature_c, th.gpu_temp_warn_c, th.gpu_temp_fail_c),
            ("hbm", g.memory_temperature_c, th.gpu_mem_temp_warn_c, th.gpu_mem_temp_fail_c),
        ):
            if value is None:
                continue
            if value >= fail:
                fails.append(f"GPU{g.index}: {label} {value:g} C")
            elif value >= warn:
                warns.append(f"GPU{g.index}: {label} {value:g} C")
    expected = (
        f"core < {th.gpu_temp_warn_c:g} C (fail {th.gpu_temp_fail_c:g}), "
        f"HBM < {th.gpu_mem_temp_warn_c:g} C (fail {th.gpu_mem_temp_fail_c:g})"
    )
    return _conclude(
        cid,
        expected,
        facts.gpu.evidence + " (temperature)",
        fails=fails,
        fail_action="check cooling (fans, coolant, airflow)",
        fail_detail=lambda first: _gpu_of(first) + "-hot",
        warns=warns,
        warn_action="check cooling",
        warn_detail="warm",
        ok="; ".join(seen),
    )


def check_power(facts: NodeFacts, exp: Expectations, th: Thresholds) -> CheckResult:
    """The enforced power limit is not capped below the default."""
    cid = "gpu.power"
    if (skip := gpu_skip(cid, facts, exp)) is not None:
        return skip
    fails, seen = [], []
    for g in facts.gpu.gpus:
        seen.append(f"GPU{g.index} {_na(g.power_draw_w)} W / limit {_na(g.power_limit_w)} W")
        if g.power_limit_w is None or not g.default_power_limit_w:
            continue
        if g.power_limit_w < th.power_limit_min_ratio * g.default_power_limit_w:
            default = g.default_power_limit_w
            fails.append(f"GPU{g.index}: limit {g.power_limit_w:g} W of default {default:g} W")
    expected = f"enforced limit >= {th.power_limit_min_ratio:g} x default limit"
    return _conclude(
        cid,
        expected,
        facts.gpu.evidence + " (power readings)",
        fails=fails,
        fail_action="restore the power limit (nvidia-smi -pl) or check the PSU/BMC capping",
        fail_detail=lambda first: _gpu_of(first) + "-capped",
        ok="; ".join(seen),
    )


def check_pcie(facts: NodeFacts, exp: Expectations, th: Thresholds) -> CheckResult:
    """PCIe link width at its max (else FAIL) and generation at least pcie_gen_min (else WARN)."""
    cid = "gpu.pcie"
    if (skip := gpu_skip(cid, facts, exp)) is not None:
        return skip
    fails, warns, seen = [], [], []
    for g in facts.gpu.gpus:
        seen.append(f"GPU{g.index} gen{_na(g.pcie_gen_current)} x{_na(g.pcie_width_current)}")
        width, wmax = g.pcie_width_current, g.pcie_width_max
        if width is not None and (width < th.pcie_width_min or (wmax is not None and width < wmax)):
            fails.append(f"GPU{g.index}: width x{width} (max x{_na(wmax)})")
        gen = g.pcie_gen_current
        if gen is not None and gen < th.pcie_gen_min:
            warns.append(f"GPU{g.index}: gen {gen} (max {_na(g.pcie_gen_max)})")
    expected = f"width >= x{th.pcie_width_min:g} and = max; gen >= {th.pcie_gen_min:g}"
    return _conclude(
        cid,
        expected,
        facts.gpu.evidence + " (pci_gpu_link_info)",
        fails=fails,
        fail_action="reseat the GPU/riser; check the slot",
        fail_detail=lambda first: _gpu_of(first) + "-width",
        warns=warns,
        warn_action="idle GPUs may downshift; if it persists under load, reseat",
        warn_detail="gen",
        ok="; ".join(seen),
    )


def check_recovery(facts: NodeFacts, exp: Expectations, th: Thresholds) -> CheckResult:
    """The driver asks for no recovery action; persistence mode on (WARN otherwise)."""
    cid = "gpu.recovery"
    if (skip := gpu_skip(cid, facts, exp)) is not None:
        return skip
    fails, warns = [], []
    for g in facts.gpu.gpus:
        action = g.recovery_action
        if action is not None and action.lower() != "none":
            fails.append(f"GPU{g.index}: recovery action {action}")
        if g.persistence_mode is False:
            warns.append(f"GPU{g.index}: persistence mode off")
    expected = "recovery action None; persistence mode on"
    return _conclude(
        cid,
        expected,
        facts.gpu.evidence + " (gpu_recovery_action, persistence_mode)",
        fails=fails,
        fail_action="do what the driver asks (reset/reboot)",
        fail_detail=lambda first: _gpu_of(first) + "-" + first.rsplit(" ", 1)[-1],
        warns=warns,
        warn_action="enable persistence (nvidia-persistenced)",
        warn_detail="persistence",
        ok="no recovery action requested",
    )


GPU_CHECKS: tuple[GpuCheck, ...] = (
    check_inventory,
    check_ecc,
    check_row_remap,
    check_xid,
    check_nvlink,
    check_nvlink_errors,
    check_clocks,
    check_temperature,
    check_power,
    check_pcie,
    check_recovery,
)


def describe_gpu(g: GpuFacts) -> str:
    """Short label used in evidence lines."""
    return f"GPU{g.index} ({g.bus_id})"
