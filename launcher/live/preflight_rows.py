"""The preflight table: one row per allocated node joining its verdict, its planned role and
what became of it (runs, spare not needed, excluded, drained with gantry's reason). A node
the gate's fabric test named shows as FAIL with the fabric finding, like a node check."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from launcher.errors import UserInputError
from launcher.job_dir import PLACEMENT_FILE
from launcher.placement_record import PlacementRecord, read_placement_record
from launcher.preflight.gate_plan import places_taken
from launcher.preflight.verdict import NodeVerdict
from launcher.slurm import NodeInfo
from topology.placement import NodeRole

#: One node of the placement, as read back from placement.json: topology's own role type.
PlannedRole = NodeRole


def read_placement(path: Path) -> PlacementRecord:
    """placement.json -> its record; a missing or malformed file gives a bare summary (the
    live view shows what it can)."""
    if not path.is_file():
        return PlacementRecord(f"unknown (no {PLACEMENT_FILE})")
    try:
        return read_placement_record(path)
    except UserInputError as err:
        return PlacementRecord(f"unknown ({err})")


@dataclass(frozen=True)
class PreflightRow:
    """One row of the table."""

    node: str
    """Node name."""
    role: str
    """Planned role ("replica 0 · stage 1", "spare", "-")."""
    status: str
    """PASS, WARN, FAIL, ERROR (a setup error of gantry's install: the node stays eligible)
    or MISSING."""
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
    errors = [c for c in verdict.checks if c.status == "ERROR"]
    if not bad and not errors:
        return "all checks passed"
    found = [f"{c.id}: {c.observed} (expected {c.expected})" for c in bad]
    found += [f"setup error, {c.id}: {c.observed}" + (f" ({c.action})" if c.action else "")
              for c in errors]
    return "; ".join(found)


def preflight_rows(verdicts: Mapping[str, NodeVerdict], placement: PlacementRecord,
                   chosen: Sequence[str], launch: Sequence[str],
                   node_states: Mapping[str, NodeInfo],
                   fabric_culprits: Mapping[str, str] | None = None) -> list[PreflightRow]:
    """Rows for every node with a verdict or a planned role, in placement order first;
    ``fabric_culprits``: node -> reason, the nodes the fabric test named."""
    culprits = fabric_culprits or {}
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
        finding = _finding(verdict)
        if node in culprits and status not in ("FAIL", "MISSING"):
            status, finding = "FAIL", f"fabric test: {culprits[node]}"
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
        rows.append(PreflightRow(node, role.label() if role else "-", status, finding,
                                 outcome))
    return rows
