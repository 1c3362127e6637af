"""What each NVIDIA Xid calls for: the one table preflight's ``gpu.xid`` and the run monitor use.

Actions, from NVIDIA's Xid catalogue (docs.nvidia.com/deploy/xid-errors):

- ``drain``: the GPU (or the node) is broken; it needs a reboot or a repair before it runs
  work again: a FAIL (preflight drains the node, the monitor evicts it from the job);
- ``reset``: the GPU needs a reset (``nvidia-smi -r`` or a reboot) before the next job: a
  FAIL as well (no job should run on it until then); the action text says reset;
- ``warn``: usually the application's own fault (a bad kernel, an illegal address): a WARN;
- ``ignore``: not reported.

A code the table does not name is ``warn``. A site changes single codes with
``preflight.xid_actions`` (``{13: ignore, 31: drain}``), merged onto :data:`DEFAULT_XID_ACTIONS`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Literal

XidAction = Literal["drain", "reset", "warn", "ignore"]
ACTIONS: tuple[str, ...] = ("drain", "reset", "warn", "ignore")
FAILING: frozenset[str] = frozenset({"drain", "reset"})
"""Actions whose Xid fails the node."""
UNLISTED: XidAction = "warn"
"""The action of a code the table does not name."""
MAX_XID = 1023

DEFAULT_XID_ACTIONS: dict[int, XidAction] = {
    13: "warn",    # graphics engine exception: the application (illegal instruction, bounds)
    31: "warn",    # GPU memory page fault: the application (illegal address)
    43: "warn",    # GPU stopped processing: the application's kernel was killed
    45: "warn",    # preemptive cleanup after another error: follows another Xid
    48: "reset",   # double-bit ECC error: the page is retired or a row remap is pending
    62: "reset",   # internal micro-controller halt
    63: "reset",   # row remapping recorded (ECC page retirement): takes effect at reset
    64: "drain",   # row remapping failed: out of spare rows, RMA
    74: "reset",   # NVLink error: reset; a link that keeps failing is hardware
    79: "drain",   # GPU has fallen off the bus: reboot, then RMA if it recurs
    92: "reset",   # high single-bit ECC error rate
    94: "reset",   # contained ECC error: the application was stopped, reset when idle
    95: "reset",   # uncontained ECC error: every application on the GPU is affected
    109: "reset",  # context switch timeout
    119: "reset",  # GSP RPC timeout
    120: "reset",  # GSP error
    123: "reset",  # SPI PMU RPC failure
    136: "reset",  # link training failed
    140: "drain",  # unrecovered ECC error
    143: "reset",  # GPU initialisation failure
    154: "reset",  # GPU recovery action changed: do what the driver asks
}
"""The default table (codes, their catalogue meaning and why the action)."""


def check_xid_actions(overrides: Mapping[int, str]) -> str | None:
    """Why ``overrides`` cannot be used (naming the code), else None."""
    for code, action in overrides.items():
        if isinstance(code, bool) or not isinstance(code, int) or not 1 <= code <= MAX_XID:
            return f"{code!r}: not an Xid (expected a number 1..{MAX_XID})"
        if action not in ACTIONS:
            return f"{code}: {action!r} is not allowed (expected one of {', '.join(ACTIONS)})"
    return None


def xid_table(overrides: Mapping[int, str] | None = None) -> dict[int, str]:
    """The defaults with a site's ``overrides`` merged on."""
    return {**DEFAULT_XID_ACTIONS, **(overrides or {})}


def action_of(table: Mapping[int, str], code: int) -> str:
    """What ``code`` calls for under ``table``."""
    return table.get(code, UNLISTED)


def failing_codes(table: Mapping[int, str]) -> list[int]:
    """The codes that fail a node under ``table``, sorted."""
    return sorted(code for code, action in table.items() if action in FAILING)
