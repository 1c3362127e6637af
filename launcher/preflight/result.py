"""The typed result every check returns (preflight's on a node, `gantry site check`'s against
the live cluster: one vocabulary, PASS / WARN / FAIL / SKIP / ERROR with an action), and how
results roll up into a status."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import asdict, dataclass
from typing import Any, Literal

Status = Literal["PASS", "WARN", "FAIL", "SKIP", "ERROR"]
STATUSES: tuple[Status, ...] = ("PASS", "WARN", "FAIL", "SKIP", "ERROR")
Rollup = Literal["PASS", "WARN", "FAIL", "ERROR"]
"""A node's (or a site's) status: the worst of its checks'."""


@dataclass(frozen=True)
class CheckResult:
    """The outcome of one check on one node."""

    id: str
    """Check id, e.g. gpu.row_remap (see docs/preflight.md)."""
    status: Status
    """PASS, WARN (allowed to run), FAIL (node must not run the job), SKIP (not applicable) or
    ERROR (a setup error: the check could not run because gantry's own install lacks a piece,
    e.g. torch; gantry's fault, never the node's, so never drained; ``action`` says what to
    install)."""
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


PIP_PACKAGES = {"pynvml": "nvidia-ml-py", "yaml": "pyyaml", "hostlist": "python-hostlist"}
"""The pip package of a module gantry imports, where its name differs."""


def setup_error(check_id: str, module: str, message: str, python: str, expected: str,
                evidence: str, duration_s: float = 0.0) -> CheckResult:
    """ERROR: ``check_id`` could not run because ``python`` (the interpreter gantry runs
    with) cannot import ``module``; the action names what to install into it."""
    top = module.split(".")[0]
    return CheckResult(
        check_id,
        "ERROR",
        f"setup error (gantry's install, not the node): {python} cannot import {module} "
        f"({message})",
        expected,
        evidence,
        f"install {top} into gantry's environment: {python} -m pip install "
        f"{PIP_PACKAGES.get(top, top)}",
        detail=token(f"no-{top}"),
        duration_s=duration_s,
    )


def worst(statuses: Iterable[Status]) -> Rollup:
    """FAIL > ERROR > WARN > PASS; SKIP counts as PASS; no results at all is PASS."""
    seen = set(statuses)
    if "FAIL" in seen:
        return "FAIL"
    if "ERROR" in seen:
        return "ERROR"
    if "WARN" in seen:
        return "WARN"
    return "PASS"


def token(text: str) -> str:
    """Drain-reason-safe short token: lower case, [a-z0-9._-], at most 48 chars."""
    out = "".join(c if c.isalnum() or c in "._-" else "-" for c in text.lower())
    while "--" in out:
        out = out.replace("--", "-")
    return out.strip("-")[:48] or "failed"
