"""Parsers for nvidia-smi output: ``-q -x`` XML, ``--query-gpu`` CSV and ``nvlink -s/-e`` text.

Field names drift between driver releases (``clocks_throttle_reasons`` became
``clocks_event_reasons``; ``power_readings/power_draw`` became
``gpu_power_readings/average_power_draw``; old ECC sections used ``double_bit/total``), so
each value is looked up under every name it has had. ``N/A``, ``[N/A]``, ``Not Supported``,
``[Not Supported]`` and ``Unknown Error`` become None.
"""

from __future__ import annotations

import csv
import io
import re
import xml.etree.ElementTree as ET
from collections.abc import Iterable, Sequence

from launcher.preflight.facts import GpuFacts, NvlinkFacts

_MISSING = {"n/a", "not supported", "unknown error", "not found", ""}
_NUMBER = re.compile(r"[-+]?\d+(?:\.\d+)?")


class ParseError(ValueError):
    """nvidia-smi output that cannot be understood at all (not one GPU found)."""


def clean(text: str | None) -> str | None:
    """Strip a raw value; None for the not-available spellings."""
    if text is None:
        return None
    value = text.strip()
    if value.startswith("[") and value.endswith("]"):
        value = value[1:-1].strip()
    return None if value.lower() in _MISSING else value


def to_float(text: str | None) -> float | None:
    """First number in a value such as ``34 C`` or ``98.58 W``; None when absent."""
    value = clean(text)
    if value is None:
        return None
    match = _NUMBER.search(value)
    return float(match.group()) if match else None


def to_int(text: str | None) -> int | None:
    """Integer value (``16x`` -> 16, ``0x2`` hex accepted); None when absent."""
    value = clean(text)
    if value is None:
        return None
    if value.lower().startswith("0x"):
        try:
            return int(value, 16)
        except ValueError:
            return None
    number = to_float(value)
    return None if number is None else int(number)


def to_bool(text: str | None) -> bool | None:
    """Yes/Enabled/Active -> True, No/Disabled/Not Active -> False, else None."""
    value = clean(text)
    if value is None:
        return None
    lowered = value.lower()
    if lowered in {"yes", "enabled", "active", "true"}:
        return True
    if lowered in {"no", "disabled", "not active", "false", "inactive"}:
        return False
    return None


def _sum_optional(values: Iterable[int | None]) -> int | None:
    seen = [v for v in values if v is not None]
    return sum(seen) if seen else None


# ---------------------------------------------------------------------------- XML


def _find(elem: ET.Element, *paths: str) -> str | None:
    """Text of the first of ``paths`` present under ``elem`` (None when none is)."""
    for path in paths:
        found = elem.find(path)
        if found is not None and found.text is not None:
            return found.text
    return None


_CLOCK_EVENT_TAGS = {
    "gpu_idle": ("gpu_idle",),
    "applications_clocks_setting": ("applications_clocks_setting",),
    "sw_power_cap": ("sw_power_cap",),
    "hw_slowdown": ("hw_slowdown",),
    "hw_thermal_slowdown": ("hw_thermal_slowdown",),
    "hw_power_brake_slowdown": ("hw_power_brake_slowdown",),
    "sync_boost": ("sync_boost",),
    "sw_thermal_slowdown": ("sw_thermal_slowdown",),
    "display_clocks_setting": ("display_clocks_setting", "display_clock_setting"),
}


def _clock_events(gpu: ET.Element) -> dict[str, bool]:
    events: dict[str, bool] = {}
    for section, prefix in (
        ("clocks_event_reasons", "clocks_event_reason_"),
        ("clocks_throttle_reasons", "clocks_throttle_reason_"),
        ("clocks_throttle_reasons", "clocks_event_reason_"),
    ):
        block = gpu.find(section)
        if block is None:
            continue
        for name, suffixes in _CLOCK_EVENT_TAGS.items():
            for suffix in suffixes:
                state = to_bool(_find(block, prefix + suffix))
                if state is not None and name not in events:
                    events[name] = state
    return events


def _ecc_total(gpu: ET.Element, scope: str, kind: str) -> int | None:
    """Sum of SRAM + DRAM ``kind`` (correctable/uncorrectable) errors in ``scope``."""
    base = f"ecc_errors/{scope}"
    if kind == "uncorrectable":
        new = [
            to_int(_find(gpu, f"{base}/dram_uncorrectable")),
            to_int(_find(gpu, f"{base}/sram_uncorrectable_parity")),
            to_int(_find(gpu, f"{base}/sram_uncorrectable_secded")),
            to_int(_find(gpu, f"{base}/sram_uncorrectable")),
        ]
        old = [to_int(_find(gpu, f"{base}/double_bit/total"))]
    else:
        new = [
            to_int(_find(gpu, f"{base}/dram_correctable")),
            to_int(_find(gpu, f"{base}/sram_correctable")),
        ]
        old = [to_int(_find(gpu, f"{base}/single_bit/total"))]
    total = _sum_optional(new)
    return total if total is not None else _sum_optional(old)


def _gpu_from_xml(gpu: ET.Element, index: int, driver: str | None) -> GpuFacts:
    bus_id = clean(gpu.get("id")) or clean(_find(gpu, "pci/pci_bus_id")) or f"gpu{index}"
    minor = to_int(_find(gpu, "minor_number"))
    link = "pci/pci_gpu_link_info"
    repair = [
        to_bool(_find(gpu, "ecc_errors/channel_repair_pending")),
        to_bool(_find(gpu, "ecc_errors/tpc_repair_pending")),
    ]
    known_repair = [r for r in repair if r is not None]
    return GpuFacts(
        index=index if minor is None else minor,
        bus_id=bus_id,
        name=clean(_find(gpu, "product_name")),
        uuid=clean(_find(gpu, "uuid")),
        driver_version=driver,
        persistence_mode=to_bool(_find(gpu, "persistence_mode")),
        recovery_action=clean(_find(gpu, "gpu_recovery_action")),
        ecc_enabled=to_bool(_find(gpu, "ecc_mode/current_ecc")),
        ecc_volatile_uncorrectable=_ecc_total(gpu, "volatile", "uncorrectable"),
        ecc_volatile_correctable=_ecc_total(gpu, "volatile", "correctable"),
        ecc_aggregate_uncorrectable=_ecc_total(gpu, "aggregate", "uncorrectable"),
        sram_threshold_exceeded=to_bool(_find(gpu, "ecc_errors/aggregate/sram_threshold_exceeded")),
        repair_pending=any(known_repair) if known_repair else None,
        unrepairable_memory=to_bool(_find(gpu, "ecc_errors/unrepairable_memory")),
        remap_pending=to_bool(_find(gpu, "remapped_rows/remapped_row_pending")),
        remap_failure=to_bool(_find(gpu, "remapped_rows/remapped_row_failure")),
        remapped_rows_uncorrectable=to_int(_find(gpu, "remapped_rows/remapped_row_unc")),
        clock_events=_clock_events(gpu),
        temperature_c=to_float(_find(gpu, "temperature/gpu_temp")),
        memory_temperature_c=to_float(_find(gpu, "temperature/memory_temp")),
        power_draw_w=to_float(
            _find(
                gpu,
                "gpu_power_readings/average_power_draw",
                "gpu_power_readings/instant_power_draw",
                "gpu_power_readings/power_draw",
                "power_readings/power_draw",
            )
        ),
        power_limit_w=to_float(
            _find(
                gpu,
                "gpu_power_readings/current_power_limit",
                "gpu_power_readings/enforced_power_limit",
                "power_readings/enforced_power_limit",
                "power_readings/power_limit",
            )
        ),
        default_power_limit_w=to_float(
            _find(
                gpu, "gpu_power_readings/default_power_limit", "power_readings/default_power_limit"
            )
        ),
        pcie_gen_current=to_int(
            _find(
                gpu, f"{link}/pcie_gen/current_link_gen", f"{link}/pcie_gen/device_current_link_gen"
            )
        ),
        pcie_gen_max=to_int(
            _find(gpu, f"{link}/pcie_gen/max_link_gen", f"{link}/pcie_gen/max_device_link_gen")
        ),
        pcie_width_current=to_int(_find(gpu, f"{link}/link_widths/current_link_width")),
        pcie_width_max=to_int(_find(gpu, f"{link}/link_widths/max_link_width")),
    )


def parse_xml(text: str) -> tuple[str | None, list[GpuFacts]]:
    """Parse ``nvidia-smi -q -x``: (driver version, GPUs). Raises ParseError if unusable."""
    try:
        root = ET.fromstring(text)
    except ET.ParseError as err:
        raise ParseError(f"nvidia-smi -q -x output is not XML ({err})") from None
    if root.tag != "nvidia_smi_log":
        raise ParseError(f"nvidia-smi -q -x: unexpected root element <{root.tag}>")
    driver = clean(_find(root, "driver_version"))
    gpus = [_gpu_from_xml(g, i, driver) for i, g in enumerate(root.findall("gpu"))]
    attached = to_int(_find(root, "attached_gpus"))
    if attached is not None and attached != len(gpus):
        raise ParseError(f"nvidia-smi -q -x: attached_gpus={attached} but {len(gpus)} <gpu> found")
    return driver, sorted(gpus, key=lambda g: g.index)


# ---------------------------------------------------------------------------- CSV

CSV_QUERY_FIELDS = (
    "index",
    "pci.bus_id",
    "name",
    "uuid",
    "driver_version",
    "persistence_mode",
    "ecc.mode.current",
    "ecc.errors.uncorrected.volatile.total",
    "ecc.errors.corrected.volatile.total",
    "ecc.errors.uncorrected.aggregate.total",
    "temperature.gpu",
    "temperature.memory",
    "power.draw",
    "power.limit",
    "power.default_limit",
    "pcie.link.gen.current",
    "pcie.link.gen.max",
    "pcie.link.width.current",
    "pcie.link.width.max",
    "clocks_event_reasons.active",
)
"""The fields gantry asks for with ``--query-gpu`` when the XML path fails."""

CSV_REMAP_FIELDS = (
    "gpu_bus_id",
    "remapped_rows.correctable",
    "remapped_rows.uncorrectable",
    "remapped_rows.pending",
    "remapped_rows.failure",
)
"""The fields of ``--query-remapped-rows``."""

_CSV_ALIASES = {
    "clocks_throttle_reasons.active": "clocks_event_reasons.active",
    "clocks.current.sm": "clocks.sm",
    "clocks.current.graphics": "clocks.gr",
    "power.draw.average": "power.draw",
    "enforced.power.limit": "power.limit",
    "power.limit.enforced": "power.limit",
    "pci.bus_id": "pci.bus_id",
    "gpu_bus_id": "gpu_bus_id",
}

# nvmlClocksEventReasons bits (nvml.h): name -> mask.
CLOCK_EVENT_BITS = {
    "gpu_idle": 0x1,
    "applications_clocks_setting": 0x2,
    "sw_power_cap": 0x4,
    "hw_slowdown": 0x8,
    "sync_boost": 0x10,
    "sw_thermal_slowdown": 0x20,
    "hw_thermal_slowdown": 0x40,
    "hw_power_brake_slowdown": 0x80,
    "display_clocks_setting": 0x100,
}


def clock_events_from_mask(mask: int) -> dict[str, bool]:
    """Decode an NVML clocks-event-reasons bitmask into named booleans."""
    return {name: bool(mask & bit) for name, bit in CLOCK_EVENT_BITS.items()}


def _header_key(column: str) -> str:
    key = column.strip()
    key = re.sub(r"\s*\[[^\]]*\]$", "", key)  # drop the unit, e.g. " [MiB]"
    return _CSV_ALIASES.get(key, key)


def _csv_rows(text: str, fields: Sequence[str]) -> list[dict[str, str]]:
    lines = [line for line in text.splitlines() if line.strip()]
    if not lines:
        return []
    reader = csv.reader(io.StringIO("\n".join(lines)), skipinitialspace=True)
    rows = [[cell.strip() for cell in row] for row in reader]
    header = [_header_key(c) for c in rows[0]]
    if any(h in fields or h in _CSV_ALIASES.values() for h in header) and not header[0].isdigit():
        keys, body = header, rows[1:]
    else:  # noheader format: columns are the requested fields in order
        keys, body = list(fields), rows
    out = []
    for row in body:
        if len(row) != len(keys):
            raise ParseError(f"nvidia-smi CSV: row has {len(row)} columns, header has {len(keys)}")
        out.append(dict(zip(keys, row, strict=True)))
    return out


def parse_csv(
    gpu_text: str, remap_text: str = "", fields: Sequence[str] = CSV_QUERY_FIELDS
) -> list[GpuFacts]:
    """Parse ``--query-gpu`` (with or without header) and optional ``--query-remapped-rows``."""
    remaps = {r.get("gpu_bus_id", ""): r for r in _csv_rows(remap_text, CSV_REMAP_FIELDS)}
    gpus = []
    for position, row in enumerate(_csv_rows(gpu_text, fields)):
        bus_id = clean(row.get("pci.bus_id")) or f"gpu{position}"
        remap = remaps.get(bus_id, {})
        mask = to_int(row.get("clocks_event_reasons.active"))
        index = to_int(row.get("index"))
        gpus.append(
            GpuFacts(
                index=position if index is None else index,
                bus_id=bus_id,
                name=clean(row.get("name")),
                uuid=clean(row.get("uuid")),
                driver_version=clean(row.get("driver_version")),
                persistence_mode=to_bool(row.get("persistence_mode")),
                ecc_enabled=to_bool(row.get("ecc.mode.current")),
                ecc_volatile_uncorrectable=to_int(row.get("ecc.errors.uncorrected.volatile.total")),
                ecc_volatile_correctable=to_int(row.get("ecc.errors.corrected.volatile.total")),
                ecc_aggregate_uncorrectable=to_int(
                    row.get("ecc.errors.uncorrected.aggregate.total")
                ),
                remap_pending=to_bool(remap.get("remapped_rows.pending")),
                remap_failure=to_bool(remap.get("remapped_rows.failure")),
                remapped_rows_uncorrectable=to_int(remap.get("remapped_rows.uncorrectable")),
                clock_events={} if mask is None else clock_events_from_mask(mask),
                temperature_c=to_float(row.get("temperature.gpu")),
                memory_temperature_c=to_float(row.get("temperature.memory")),
                power_draw_w=to_float(row.get("power.draw")),
                power_limit_w=to_float(row.get("power.limit")),
                default_power_limit_w=to_float(row.get("power.default_limit")),
                pcie_gen_current=to_int(row.get("pcie.link.gen.current")),
                pcie_gen_max=to_int(row.get("pcie.link.gen.max")),
                pcie_width_current=to_int(row.get("pcie.link.width.current")),
                pcie_width_max=to_int(row.get("pcie.link.width.max")),
            )
        )
    if not gpus:
        raise ParseError("nvidia-smi --query-gpu printed no GPU rows")
    return sorted(gpus, key=lambda g: g.index)


# ---------------------------------------------------------------------------- NVLink text

_GPU_LINE = re.compile(r"^GPU (\d+):")
_LINK_SPEED = re.compile(r"^\s*Link (\d+):\s*(.*?)\s*$")
_LINK_ERROR = re.compile(r"^\s*Link (\d+):\s*([A-Za-z ]+?) Errors?:\s*(\S+)\s*$")


def parse_nvlink(status_text: str, errors_text: str = "") -> list[NvlinkFacts]:
    """Parse ``nvidia-smi nvlink -s`` (speeds, ``<inactive>``) and ``nvlink -e`` (counters)."""
    active: dict[int, dict[int, bool]] = {}
    speeds: dict[int, dict[int, float]] = {}
    errors: dict[int, dict[int, dict[str, int]]] = {}
    gpu: int | None = None
    for line in status_text.splitlines():
        head = _GPU_LINE.match(line)
        if head:
            gpu = int(head.group(1))
            active.setdefault(gpu, {})
            speeds.setdefault(gpu, {})
            continue
        link = _LINK_SPEED.match(line)
        if link and gpu is not None:
            value = link.group(2)
            number = int(link.group(1))
            up = "inactive" not in value.lower() and "down" not in value.lower()
            active[gpu][number] = up
            speed = to_float(value) if up else None
            if speed is not None:
                speeds[gpu][number] = speed
    gpu = None
    for line in errors_text.splitlines():
        head = _GPU_LINE.match(line)
        if head:
            gpu = int(head.group(1))
            errors.setdefault(gpu, {})
            continue
        err = _LINK_ERROR.match(line)
        if err and gpu is not None:
            count = to_int(err.group(3))
            if count is not None:
                name = err.group(2).strip().lower().replace(" ", "_")
                errors[gpu].setdefault(int(err.group(1)), {})[name] = count
    return [
        NvlinkFacts(
            gpu_index=g,
            link_active=active.get(g, {}),
            link_speed_gbps=speeds.get(g, {}),
            errors=errors.get(g, {}),
        )
        for g in sorted(set(active) | set(errors))
    ]
