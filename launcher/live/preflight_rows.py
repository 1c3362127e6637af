"""The preflight table: one row per allocated node joining its verdict, its planned role and
what became of it (runs, spare not needed, excluded, drained with gantry's reason)."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from launcher.preflight.gate_plan import places_taken
from launcher.preflight.verdict import NodeVerdict
from launcher.slurm import NodeInfo
from topology.placement import NodeRole

#: One node of the placement, as read back from placement.json: topology's own role type.
PlannedRole = NodeRole


@dataclass(frozen=True)
class PlacementInfo:
    """What placement.json says: a planned placement (roles), or only a summary line."""

    summary: str
    """One line, e.g. "n[1-4] (spares n5), 2 leaf switches under spine1"."""
    roles: tuple[PlannedRole, ...]
    """Planned nodes in rank order, then spares (empty when Slurm chose)."""
    domain: str = ""
    """Switch holding every planned node."""

    def role_of(self, node: str) -> PlannedRole | None:
        return next((r for r in self.roles if r.node == node), None)


def read_placement(path: Path) -> PlacementInfo:
    """placement.json -> PlacementInfo (an unreadable or older file gives a bare summary)."""
    try:
        data: Any = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return PlacementInfo("unknown (no placement.json)", ())
    if not isinstance(data, dict):
        return PlacementInfo("unknown", ())
    summary = str(data.get("summary") or "Slurm chooses the nodes")
    plan = data.get("plan") if isinstance(data.get("plan"), dict) else None
    if plan is None or data.get("mode") not in (None, "planned"):
        return PlacementInfo(summary, ())
    roles = []
    for role in plan.get("roles") or []:
        slots = tuple((int(r["replica"]), int(r["stage"])) for r in role.get("ranks") or [])
        roles.append(PlannedRole(str(role["node"]), str(role.get("leaf") or ""), slots))
    return PlacementInfo(summary, tuple(roles), str(plan.get("domain") or ""))


@dataclass(frozen=True)
class PreflightRow:
    """One row of the table."""

    node: str
    """Node name."""
    role: str
    """Planned role ("replica 0 · stage 1", "spare", "-")."""
    status: str
    """PASS, WARN, FAIL or MISSING."""
    finding: str
    """The failing (or warning) checks with observed vs expected, else "all checks passed"."""
    outcome: str
    """runs / runs in <planned node>'s place (<its role>) / spare, not needed / excluded /
    excluded, drained: <reason>."""


def _finding(verdict: NodeVerdict | None) -> str:
    if verdict is None:
        return "no verdict"
    bad = [c for c in verdict.checks if c.status == "FAIL"] or [
        c for c in verdict.checks if c.status == "WARN"]
    if not bad:
        return "all checks passed"
    return "; ".join(f"{c.id}: {c.observed} (expected {c.expected})" for c in bad)


def preflight_rows(verdicts: Mapping[str, NodeVerdict], placement: PlacementInfo,
                   chosen: Sequence[str], launch: Sequence[str],
                   node_states: Mapping[str, NodeInfo]) -> list[PreflightRow]:
    """Rows for every node with a verdict or a planned role, in placement order first."""
    order = [r.node for r in placement.roles]
    order += sorted(n for n in verdicts if n not in order)
    ran = set(launch or chosen)
    planned = [r.node for r in placement.roles if not r.spare]
    stand_in = {new: old for old, new in places_taken(planned, launch or chosen)}
    rows = []
    for node in order:
        verdict = verdicts.get(node)
        role = placement.role_of(node)
        state = node_states.get(node)
        status = verdict.status if verdict is not None else "MISSING"
        if node in ran and node in stand_in:
            replaced = placement.role_of(stand_in[node])
            outcome = f"runs in {stand_in[node]}'s place" + (
                f" ({replaced.label()})" if replaced is not None else "")
        elif node in ran:
            outcome = "runs"
        elif state is not None and state.drained:
            outcome = f"excluded, drained: {state.reason or '(no reason)'}"
        elif status in ("FAIL", "MISSING"):
            outcome = "excluded"
        else:
            outcome = "spare, not needed" if role is None or role.spare else "not used"
        rows.append(PreflightRow(node, role.label() if role else "-", status,
                                 _finding(verdict), outcome))
    return rows
