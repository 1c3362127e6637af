"""The typed result every check returns (preflight's on a node, `gantry site check`'s against
the live cluster: one vocabulary, PASS / WARN / FAIL / SKIP with an action), and how results
roll up into a status."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import asdict, dataclass
from typing import Any, Literal

Status = Literal["PASS", "WARN", "FAIL", "SKIP"]
STATUSES: tuple[Status, ...] = ("PASS", "WARN", "FAIL", "SKIP")


@dataclass(frozen=True)
class CheckResult:
    """The outcome of one check on one node."""

    id: str
    """Check id, e.g. gpu.row_remap (see docs/preflight.md)."""
    status: Status
    """PASS, WARN (allowed to run), FAIL (node must not run the job) or SKIP (not applicable)."""
    observed: str
    """What was measured, e.g. "GPU1: pending=Yes"."""
    expected: str = ""
    """What was required, e.g. "no pending remaps" ("" when the observation speaks for
    itself)."""
    evidence: str = ""
    """Where the observation came from (command, file, counter)."""
    action: str = ""
    """What an operator should do about a WARN/FAIL."""
    detail: str = ""
    """Short token for the drain reason gantry:<id>:<detail> (no spaces), e.g. gpu1-pending."""
    reason: str = ""
    """Why a check was skipped."""
    duration_s: float = 0.0
    """Time the check (and any active test behind it) took."""

    def to_json(self) -> dict[str, Any]:
        """A plain dict for ``--json`` (the keys are the field names)."""
        return asdict(self)


def passed(check_id: str, observed: str, expected: str, evidence: str = "") -> CheckResult:
    return CheckResult(check_id, "PASS", observed, expected, evidence)


def skipped(check_id: str, reason: str) -> CheckResult:
    return CheckResult(check_id, "SKIP", "-", "-", reason=reason)


def worst(statuses: Iterable[Status]) -> Literal["PASS", "WARN", "FAIL"]:
    """FAIL > WARN > PASS; SKIP counts as PASS; no results at all is PASS."""
    seen = set(statuses)
    if "FAIL" in seen:
        return "FAIL"
    if "WARN" in seen:
        return "WARN"
    return "PASS"


def token(text: str) -> str:
    """Drain-reason-safe short token: lower case, [a-z0-9._-], at most 48 chars."""
    out = "".join(c if c.isalnum() or c in "._-" else "-" for c in text.lower())
    while "--" in out:
        out = out.replace("--", "-")
    return out.strip("-")[:48] or "failed"
