"""The drain policy as a pure function: who to drain, who to resume, who to leave alone.

Rules (LBNL NHC's, plus a rate limit):
- gantry drains with reasons ``gantry:<check>:<detail>`` and only touches nodes whose current
  reason is empty or exactly its own (drain_reason); an operator's reason is never
  overwritten nor resumed.
- a node gantry drained is resumed after ``resume_after_passes`` consecutive clean runs.
- at most max(1, floor(max_drain_fraction * cluster size)) nodes are drained per
  ``drain_window_s``: a systemic fault (bad driver push, shared FS down) cannot drain the
  cluster. Nodes over the limit are still excluded from the job, just not drained.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Literal

from launcher.preflight.drain_reason import is_gantry_reason
from launcher.preflight.state import NodeHistory


@dataclass(frozen=True)
class NodeState:
    """A node as Slurm reports it."""

    name: str
    """Node name."""
    state: str
    """State with flags, e.g. IDLE, ALLOCATED, MIXED+DRAIN, DOWN+DRAIN."""
    reason: str | None = None
    """Reason text without Slurm's ``[user@time]`` suffix; None when unset."""

    @property
    def drained(self) -> bool:
        flags = self.state.upper().replace("+", " ").split()
        return any(f in ("DRAIN", "DRAINED", "DRAINING", "DOWN", "FAIL") for f in flags)

    @property
    def owned(self) -> bool:
        """True when the reason is exactly one gantry writes (drain_reason)."""
        return is_gantry_reason(self.reason)

    @property
    def operator_reason(self) -> bool:
        """True when someone else set a reason (or downed it without gantry)."""
        return bool(self.reason) and not self.owned


@dataclass(frozen=True)
class PolicyConfig:
    """Drain policy settings (site preflight section)."""

    enabled: bool = True
    """Drain at all (preflight.drain)."""
    resume_after_passes: int = 3
    """K clean passes before gantry resumes its own drain."""
    max_drain_fraction: float = 0.1
    """Fraction of the cluster gantry may drain per window."""
    drain_window_s: float = 3600
    """Rate-limit window."""
    cluster_size: int = 1
    """Nodes in the cluster."""

    @property
    def max_drains(self) -> int:
        return max(1, math.floor(self.max_drain_fraction * self.cluster_size))


@dataclass(frozen=True)
class Action:
    """What the policy decided for one node."""

    node: str
    """Node name."""
    kind: Literal["drain", "resume", "keep"]
    """drain / resume through scontrol, or leave as is."""
    reason: str = ""
    """Reason to set (drain) or the reason found (keep/resume)."""
    note: str = ""
    """Why, for the log."""


def plan(
    outcomes: Mapping[str, str | None],
    states: Mapping[str, NodeState],
    histories: Mapping[str, NodeHistory],
    recent_history: Iterable[NodeHistory],
    cfg: PolicyConfig,
    now: float,
) -> tuple[list[Action], dict[str, NodeHistory]]:
    """Decide per node. ``outcomes``: node -> drain reason when it failed, None when clean.

    Returns the actions and the updated histories of the nodes in ``outcomes``.
    """
    window_start = now - cfg.drain_window_s
    recent = {
        h.node
        for h in recent_history
        if h.drained_at is not None and h.drained_at >= window_start and h.node not in outcomes
    }
    recent |= {
        n for n, h in histories.items() if h.drained_at is not None and h.drained_at >= window_start
    }
    actions: list[Action] = []
    updated: dict[str, NodeHistory] = {}
    for node in outcomes:
        reason = outcomes[node]
        hist = histories.get(node) or NodeHistory(node)
        state = states.get(node) or NodeState(node, "UNKNOWN")
        if reason is not None:
            hist = replace(hist, clean_passes=0, last_status="FAIL", last_run=now)
            if state.operator_reason:
                actions.append(
                    Action(
                        node,
                        "keep",
                        state.reason or "",
                        "operator reason kept (gantry never overwrites it)",
                    )
                )
            elif state.owned and state.drained:
                actions.append(
                    Action(node, "keep", state.reason or "", "already drained by gantry")
                )
            elif not cfg.enabled:
                actions.append(Action(node, "keep", reason, "draining disabled (preflight.drain)"))
            elif len(recent) >= cfg.max_drains and node not in recent:
                actions.append(
                    Action(
                        node,
                        "keep",
                        reason,
                        f"rate limit: {len(recent)} drains in the last "
                        f"{cfg.drain_window_s:g} s (max {cfg.max_drains}); excluded only",
                    )
                )
            else:
                recent.add(node)
                hist = replace(hist, drained_by_gantry=True, drain_reason=reason, drained_at=now)
                actions.append(Action(node, "drain", reason, "failed preflight"))
        else:
            hist = replace(
                hist, clean_passes=hist.clean_passes + 1, last_status="PASS", last_run=now
            )
            if state.owned and state.drained:
                if hist.clean_passes >= cfg.resume_after_passes:
                    hist = replace(hist, drained_by_gantry=False, drain_reason=None)
                    actions.append(
                        Action(
                            node, "resume", state.reason or "", f"{hist.clean_passes} clean passes"
                        )
                    )
                else:
                    actions.append(
                        Action(
                            node,
                            "keep",
                            state.reason or "",
                            f"clean pass {hist.clean_passes}/{cfg.resume_after_passes} "
                            "before resume",
                        )
                    )
            else:
                if hist.drained_by_gantry and not state.owned:
                    hist = replace(hist, drained_by_gantry=False)  # someone else took over
                actions.append(Action(node, "keep", state.reason or "", "healthy"))
        updated[node] = hist
    return actions, updated
