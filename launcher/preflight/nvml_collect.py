"""GPU facts through NVML (nvidia-ml-py's ``pynvml``) when it is importable and initialises.

Same records as the nvidia-smi path. Each query that the GPU or driver does not support
yields None for that field instead of failing the whole collection.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from launcher.preflight.facts import GpuFacts, GpuInventory, NvlinkFacts
from launcher.preflight.nvsmi_parse import clock_events_from_mask

NVLINK_MAX_LINKS = 18


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def nvml_available() -> bool:
    """True when pynvml imports and nvmlInit succeeds (a driver is loaded)."""
    try:
        import pynvml

        pynvml.nvmlInit()
        pynvml.nvmlShutdown()
    except Exception:  # ImportError, NVMLError_LibraryNotFound, DriverNotLoaded, ...
        return False
    return True


def collect_nvml() -> GpuInventory:
    """Read every GPU through NVML; errors become GpuInventory.error."""
    try:
        import pynvml
    except ImportError:
        return GpuInventory(source="nvml", error="pynvml (nvidia-ml-py) is not installed")

    def get(fn: Callable[..., Any], *args: Any) -> Any:
        try:
            return fn(*args)
        except pynvml.NVMLError:
            return None

    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as err:
        return GpuInventory(source="nvml", error=f"nvmlInit failed: {err}")
    try:
        driver = _text(pynvml.nvmlSystemGetDriverVersion())
        gpus, links = [], []
        for index in range(pynvml.nvmlDeviceGetCount()):
            h = pynvml.nvmlDeviceGetHandleByIndex(index)

            def mw(fn: Callable[..., Any], handle: Any = h) -> float | None:
                value = get(fn, handle)
                return None if value is None else float(value) / 1000.0

            ecc = get(pynvml.nvmlDeviceGetEccMode, h)
            remap = get(pynvml.nvmlDeviceGetRemappedRows, h)
            reasons_fn = getattr(
                pynvml,
                "nvmlDeviceGetCurrentClocksEventReasons",
                getattr(pynvml, "nvmlDeviceGetCurrentClocksThrottleReasons", None),
            )
            mask = get(reasons_fn, h) if reasons_fn is not None else None
            pci = get(pynvml.nvmlDeviceGetPciInfo, h)
            persistence = get(pynvml.nvmlDeviceGetPersistenceMode, h)
            unc, cor = (
                pynvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED,
                pynvml.NVML_MEMORY_ERROR_TYPE_CORRECTED,
            )
            gpus.append(
                GpuFacts(
                    index=index,
                    bus_id=_text(pci.busId) if pci is not None else f"gpu{index}",
                    name=_text(get(pynvml.nvmlDeviceGetName, h)),
                    uuid=_text(get(pynvml.nvmlDeviceGetUUID, h)),
                    driver_version=driver,
                    persistence_mode=None if persistence is None else bool(persistence),
                    ecc_enabled=None if ecc is None else bool(ecc[0]),
                    ecc_volatile_uncorrectable=get(
                        pynvml.nvmlDeviceGetTotalEccErrors, h, unc, pynvml.NVML_VOLATILE_ECC
                    ),
                    ecc_volatile_correctable=get(
                        pynvml.nvmlDeviceGetTotalEccErrors, h, cor, pynvml.NVML_VOLATILE_ECC
                    ),
                    ecc_aggregate_uncorrectable=get(
                        pynvml.nvmlDeviceGetTotalEccErrors, h, unc, pynvml.NVML_AGGREGATE_ECC
                    ),
                    remap_pending=None if remap is None else bool(remap[2]),
                    remap_failure=None if remap is None else bool(remap[3]),
                    remapped_rows_uncorrectable=None if remap is None else int(remap[1]),
                    clock_events={} if mask is None else clock_events_from_mask(int(mask)),
                    temperature_c=get(
                        pynvml.nvmlDeviceGetTemperature, h, pynvml.NVML_TEMPERATURE_GPU
                    ),
                    power_draw_w=mw(pynvml.nvmlDeviceGetPowerUsage),
                    power_limit_w=mw(pynvml.nvmlDeviceGetEnforcedPowerLimit),
                    default_power_limit_w=mw(pynvml.nvmlDeviceGetPowerManagementDefaultLimit),
                    pcie_gen_current=get(pynvml.nvmlDeviceGetCurrPcieLinkGeneration, h),
                    pcie_gen_max=get(pynvml.nvmlDeviceGetMaxPcieLinkGeneration, h),
                    pcie_width_current=get(pynvml.nvmlDeviceGetCurrPcieLinkWidth, h),
                    pcie_width_max=get(pynvml.nvmlDeviceGetMaxPcieLinkWidth, h),
                )
            )
            active: dict[int, bool] = {}
            errors: dict[int, dict[str, int]] = {}
            for link in range(NVLINK_MAX_LINKS):
                state = get(pynvml.nvmlDeviceGetNvLinkState, h, link)
                if state is None:
                    continue
                active[link] = state == pynvml.NVML_FEATURE_ENABLED
                counters = {}
                for name, kind in (
                    ("replay", pynvml.NVML_NVLINK_ERROR_DL_REPLAY),
                    ("recovery", pynvml.NVML_NVLINK_ERROR_DL_RECOVERY),
                    ("crc", pynvml.NVML_NVLINK_ERROR_DL_CRC_FLIT),
                ):
                    count = get(pynvml.nvmlDeviceGetNvLinkErrorCounter, h, link, kind)
                    if count is not None:
                        counters[name] = int(count)
                errors[link] = counters
            if active:
                links.append(NvlinkFacts(gpu_index=index, link_active=active, errors=errors))
        return GpuInventory(
            source="nvml",
            gpus=tuple(gpus),
            driver_version=driver,
            nvlinks=tuple(links),
            evidence="NVML (pynvml)",
        )
    except pynvml.NVMLError as err:
        return GpuInventory(source="nvml", error=f"NVML query failed: {err}")
    finally:
        get(pynvml.nvmlShutdown)
