"""Collects GPU facts once: NVML when available, else nvidia-smi (XML, CSV as fallback).

An explicit ``GANTRY_NVIDIA_SMI`` always wins (that is how faults are injected and how odd
sites point at their tool); ``GANTRY_GPU_SOURCE=nvml|nvidia-smi`` forces a source. The three
nvidia-smi calls (``-q -x``, ``nvlink -s``, ``nvlink -e``) run in parallel, each under the
watchdog; a hung ``-q -x`` is reported, not retried.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor

from launcher.preflight.facts import GpuFacts, GpuInventory, NvlinkFacts
from launcher.preflight.nvml_collect import collect_nvml, nvml_available
from launcher.preflight.nvsmi_parse import (
    CSV_QUERY_FIELDS,
    CSV_REMAP_FIELDS,
    ParseError,
    parse_csv,
    parse_nvlink,
    parse_xml,
)
from launcher.process_runner import run_tool
from launcher.slurm.tools import tool_overridden, tool_path


def choose_source(env: Mapping[str, str] | None = None) -> str:
    """ "nvidia-smi", "nvml" or "none" (no GPU tooling on this node)."""
    environ = os.environ if env is None else env
    forced = environ.get("GANTRY_GPU_SOURCE", "auto")
    if tool_overridden("nvidia-smi", environ) or forced == "nvidia-smi":
        return "nvidia-smi"
    if forced == "nvml" or (forced == "auto" and nvml_available()):
        return "nvml"
    return "nvidia-smi" if tool_path("nvidia-smi", environ) else "none"


def collect_nvidia_smi(timeout_s: float, env: Mapping[str, str] | None = None) -> GpuInventory:
    """Run nvidia-smi and parse its output into a GpuInventory."""
    exe = tool_path("nvidia-smi", env)
    if exe is None:
        return GpuInventory(source="none", error="nvidia-smi not found on PATH")
    with ThreadPoolExecutor(max_workers=3) as pool:
        xml_f = pool.submit(run_tool, [exe, "-q", "-x"], timeout_s, env)
        nvs_f = pool.submit(run_tool, [exe, "nvlink", "-s"], timeout_s, env)
        nve_f = pool.submit(run_tool, [exe, "nvlink", "-e"], timeout_s, env)
        xml_out, nvs_out, nve_out = xml_f.result(), nvs_f.result(), nve_f.result()
    nvlinks: tuple[NvlinkFacts, ...] = ()
    nvlink_error: str | None = None
    if nvs_out.ok:
        nvlinks = tuple(parse_nvlink(nvs_out.stdout, nve_out.stdout if nve_out.ok else ""))
        if not nve_out.ok:
            nvlink_error = nve_out.describe_failure()
    else:
        nvlink_error = nvs_out.describe_failure()
    evidence = f"{exe} -q -x; {exe} nvlink -s; {exe} nvlink -e"
    if not xml_out.ok:
        return GpuInventory(
            source="nvidia-smi-xml", error=xml_out.describe_failure(), evidence=evidence
        )
    try:
        driver, gpus = parse_xml(xml_out.stdout)
        source = "nvidia-smi-xml"
    except ParseError as xml_err:
        fallback = _csv_fallback(exe, timeout_s, env)
        if isinstance(fallback, str):
            return GpuInventory(
                source="nvidia-smi-xml",
                error=f"{xml_err}; CSV fallback: {fallback}",
                evidence=evidence,
            )
        gpus = fallback
        driver = gpus[0].driver_version if gpus else None
        source = "nvidia-smi-csv"
        evidence += f"; {exe} --query-gpu=... --format=csv"
    return GpuInventory(
        source=source,
        gpus=tuple(gpus),
        driver_version=driver,
        nvlinks=nvlinks,
        nvlink_error=nvlink_error,
        evidence=evidence,
    )


def _csv_fallback(
    exe: str, timeout_s: float, env: Mapping[str, str] | None
) -> list[GpuFacts] | str:
    """GPU facts from the CSV queries, or why they could not be had."""
    gpu_out = run_tool(
        [exe, "--query-gpu=" + ",".join(CSV_QUERY_FIELDS), "--format=csv"], timeout_s, env
    )
    if not gpu_out.ok:
        return gpu_out.describe_failure()
    remap_out = run_tool(
        [exe, "--query-remapped-rows=" + ",".join(CSV_REMAP_FIELDS), "--format=csv"],
        timeout_s,
        env,
    )
    try:
        return parse_csv(gpu_out.stdout, remap_out.stdout if remap_out.ok else "")
    except ParseError as err:
        return str(err)


def collect_gpus(timeout_s: float, env: Mapping[str, str] | None = None) -> GpuInventory:
    """The node's GPU inventory from the chosen source."""
    source = choose_source(env)
    if source == "none":
        return GpuInventory(source="none", error="no GPU tooling (nvidia-smi or NVML) found")
    if source == "nvml":
        return collect_nvml()
    return collect_nvidia_smi(timeout_s, env)
