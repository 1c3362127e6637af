"""Xid events from the kernel log (``dmesg``, overridable by ``GANTRY_DMESG``).

NVRM prints ``NVRM: Xid (PCI:0000:00:06): 79, pid=..., GPU has fallen off the bus.``;
the bracketed kernel timestamp (seconds since boot) places each event in the check window,
and the boot id (``<proc>/sys/kernel/random/boot_id``) scopes de-duplication to one boot.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from launcher.preflight.facts import KernelLog, XidEvent
from launcher.preflight.host_info import read_boot_id, read_uptime
from launcher.process_runner import run_tool
from launcher.slurm.tools import tool_path

_XID = re.compile(r"NVRM: Xid \((?:PCI:)?([0-9A-Fa-f:.]+)\):\s*(\d+)")
_STAMP = re.compile(r"^\[\s*(\d+(?:\.\d+)?)\]")


def parse_dmesg(text: str) -> list[XidEvent]:
    """Every Xid line in ``text`` (raw ``dmesg`` output), in log order."""
    events = []
    for line in text.splitlines():
        match = _XID.search(line)
        if not match:
            continue
        stamp = _STAMP.match(line)
        events.append(
            XidEvent(
                pci=match.group(1).lower(),
                code=int(match.group(2)),
                uptime_s=float(stamp.group(1)) if stamp else None,
                text=line.strip()[:300],
            )
        )
    return events


def collect_kernel_log(timeout_s: float, env: Mapping[str, str] | None = None) -> KernelLog:
    """Run dmesg and keep its Xid lines; a missing, refused or hung dmesg is an error."""
    uptime = read_uptime(env)
    boot_id = read_boot_id(env)
    exe = tool_path("dmesg", env)
    if exe is None:
        return KernelLog(uptime_s=uptime, boot_id=boot_id, error="dmesg not found on PATH")
    out = run_tool([exe], timeout_s, env)
    if not out.ok:
        return KernelLog(uptime_s=uptime, boot_id=boot_id, error=out.describe_failure())
    return KernelLog(
        events=tuple(parse_dmesg(out.stdout)), uptime_s=uptime, boot_id=boot_id, error=None
    )
