"""One site check's outcome (status, what was observed, what was expected) and the verdict."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

Status = Literal["ok", "warn", "fail", "skip"]

_RANK: dict[str, int] = {"skip": 0, "ok": 1, "warn": 2, "fail": 3}


@dataclass(frozen=True)
class SiteCheck:
    """What one comparison between the site config and the live cluster found."""

    name: str
    """Short id, e.g. "partition", "gpus", "topology"."""
    status: Status
    """ok, warn (works, but not as configured), fail (jobs would fail or be misplaced), skip."""
    observed: str
    """What the live cluster (or this host) shows."""
    expected: str = ""
    """What the site config implies ("" when the observation speaks for itself)."""
    hint: str = ""
    """What to do about a warn or fail."""

    def to_json(self) -> dict[str, Any]:
        """A plain dict for ``--json``."""
        return {"name": self.name, "status": self.status, "observed": self.observed,
                "expected": self.expected, "hint": self.hint}


def worst(checks: Sequence[SiteCheck]) -> Status:
    """The most serious status among ``checks`` ("ok" when there are none)."""
    found: Status = "ok"
    for check in checks:
        if _RANK[check.status] > _RANK[found]:
            found = check.status
    return found
