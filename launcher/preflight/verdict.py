"""The node verdict: versioned JSON that ``gantry preflight --json`` prints and the gate reads.

Schema ``gantry.preflight.verdict`` version 1: node, level, status (PASS/WARN/FAIL/ERROR), timing,
the GPU source and one object per check (id, status, observed, expected, evidence, action,
detail, reason, duration_s). Parsing validates every field (typed_config), so a corrupt or
foreign verdict is a one-line error, never a traceback.
"""

from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass, field
from typing import Any

from launcher.errors import UserInputError
from launcher.preflight.drain_reason import DRAIN_PREFIX
from launcher.preflight.levels import Level
from launcher.preflight.result import CheckResult, Rollup
from launcher.typed_config import FieldError, from_mapping

SCHEMA = "gantry.preflight.verdict"
SCHEMA_VERSION = 1



@dataclass(frozen=True)
class NodeVerdict:
    """All check results of one node and the overall status."""

    node: str
    """Slurm node name (SLURMD_NODENAME) or short host name."""
    level: Level
    """quick, standard or deep."""
    status: Rollup
    """Worst check status: FAIL > ERROR > WARN > PASS (SKIP counts as PASS). ERROR: nothing
    failed, but a check could not run for a setup error of gantry's install (see
    ``setup_errors``); the node is not at fault and is not drained."""
    started_at: str
    """ISO 8601 UTC start time."""
    duration_s: float
    """Wall time of the whole run."""
    gantry_version: str
    """gantry that produced it."""
    gpu_source: str
    """nvml, nvidia-smi-xml, nvidia-smi-csv or none."""
    checks: list[CheckResult] = field(default_factory=list)
    """Every check, in run order."""
    schema: str = SCHEMA
    """Always gantry.preflight.verdict."""
    version: int = SCHEMA_VERSION
    """Schema version."""

    def validate(self) -> None:
        if self.schema != SCHEMA:
            raise FieldError("schema", f"{self.schema!r} is not allowed (expected {SCHEMA!r})")
        if self.version != SCHEMA_VERSION:
            raise FieldError(
                "version", f"{self.version} is not supported (this gantry reads {SCHEMA_VERSION})"
            )

    def failures(self) -> list[CheckResult]:
        return [c for c in self.checks if c.status == "FAIL"]

    def setup_errors(self) -> list[CheckResult]:
        """Checks that could not run because gantry's own install lacks a piece."""
        return [c for c in self.checks if c.status == "ERROR"]

    def drain_reason(self) -> str | None:
        """``gantry:<check>:<detail>`` of the first failing check; ``gantry:preflight:failed``
        for a FAIL verdict that names no failing check; None when nothing failed. The verdict
        comes from a node: its id and detail are cut to one word each, as a Slurm reason."""
        fails = self.failures()
        if not fails:
            return f"{DRAIN_PREFIX}preflight:failed" if self.status == "FAIL" else None
        first = fails[0]
        more = f" (+{len(fails) - 1} more)" if len(fails) > 1 else ""
        return (f"{DRAIN_PREFIX}{_reason_word(first.id, 'check')}:"
                f"{_reason_word(first.detail, 'failed')}{more}")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


_REASON_UNSAFE = re.compile(r"[^A-Za-z0-9._/+=@%-]+")


def _reason_word(text: str, empty: str) -> str:
    """``text`` as one short word of a Slurm reason: anything but letters, digits and
    ``._/+=@%-`` becomes '-', at most 64 characters (``empty`` when nothing is left)."""
    word = _REASON_UNSAFE.sub("-", text).strip("-")[:64]
    return word or empty


def verdict_from_dict(data: Any, source: str) -> NodeVerdict:
    """Validate and build a verdict; UserInputError naming ``source`` and the field."""
    return from_mapping(NodeVerdict, data, source)


def verdict_from_json(text: str, source: str) -> NodeVerdict:
    try:
        data = json.loads(text)
    except json.JSONDecodeError as err:
        raise UserInputError(f"{source}: not JSON ({err.msg} at line {err.lineno})") from None
    except ValueError:  # an integer of more than 4,300 digits (int()'s limit)
        raise UserInputError(f"{source}: not a verdict (a number of more than 4,300 digits)"
                             ) from None
    except RecursionError:
        raise UserInputError(f"{source}: nested too deeply to be a verdict") from None
    return verdict_from_dict(data, source)
