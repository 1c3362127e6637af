"""placement.json, a job's placement record: the one reader, shared by the gate and the live view.

``gantry submit`` writes it (launcher/job_placement.py: ``JobPlacement.to_json``)::

    {"mode": "planned" | "slurm" | "none", "pin", "summary", "sbatch_options", "notes",
     "plan": topology's placement or null, "cluster_state"}

The nodes are named once, in ``plan.roles``: each planned node with its leaf switch and its
ranks (``{"replica", "stage"}``; none for a spare), the rank nodes in rank order, then the
spares. They are the job's nodes only in mode "planned" (mode "slurm" keeps the plan of an
idle cluster, for the switch count; mode "none" has none). :func:`read_placement_record` is
strict (the gate pins nodes by it): anything else is a one-line error naming the file and
the field.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from launcher.errors import UserInputError
from topology.placement import NodeRole

MODES = ("planned", "slurm", "none")


@dataclass(frozen=True)
class PlacementRecord:
    """What placement.json says about the job's nodes."""

    summary: str
    """One line, e.g. "n[1-4] (spares n5), 2 leaf switches under spine1"."""
    roles: tuple[NodeRole, ...] = ()
    """Planned nodes in rank order, then spares (empty when Slurm chose)."""
    domain: str = ""
    """Switch holding every planned node."""

    @property
    def rank_nodes(self) -> tuple[str, ...]:
        """Nodes that run ranks, in rank order."""
        return tuple(r.node for r in self.roles if not r.spare)

    @property
    def spare_nodes(self) -> tuple[str, ...]:
        """Planned spares, in plan order."""
        return tuple(r.node for r in self.roles if r.spare)

    def role_of(self, node: str) -> NodeRole | None:
        return next((r for r in self.roles if r.node == node), None)


def _fail(where: str, field: str, value: Any, allowed: str) -> UserInputError:
    return UserInputError(f"{where}: {field}: {value!r} is not allowed (expected {allowed})")


def _whole(value: Any, where: str, field: str) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise _fail(where, field, value, "a whole number >= 0")
    return value


def _role(raw: Any, where: str, index: int) -> NodeRole:
    field = f"plan.roles[{index}]"
    if not isinstance(raw, dict):
        raise _fail(where, field, raw, "an object with node, leaf, ranks")
    node, leaf, ranks = raw.get("node"), raw.get("leaf", ""), raw.get("ranks", [])
    if not isinstance(node, str) or not node:
        raise _fail(where, f"{field}.node", node, "a node name")
    if not isinstance(leaf, str):
        raise _fail(where, f"{field}.leaf", leaf, "a switch name")
    if not isinstance(ranks, list) or not all(isinstance(r, dict) for r in ranks):
        raise _fail(where, f"{field}.ranks", ranks, "a list of {replica, stage}")
    slots = tuple((_whole(r.get("replica"), where, f"{field}.ranks.replica"),
                   _whole(r.get("stage"), where, f"{field}.ranks.stage")) for r in ranks)
    return NodeRole(node, leaf, slots)


def placement_record(data: Any, where: str) -> PlacementRecord:
    """The record in the parsed placement.json ``data`` (``where``: its path, for errors)."""
    if not isinstance(data, dict):
        raise UserInputError(f"{where}: expected a JSON object (gantry's placement.json)")
    mode, summary, plan = data.get("mode"), data.get("summary", ""), data.get("plan")
    if mode not in MODES:
        raise _fail(where, "mode", mode, " or ".join(MODES))
    if not isinstance(summary, str):
        raise _fail(where, "summary", summary, "one line of text")
    if plan is None or mode != "planned":
        return PlacementRecord(summary or "Slurm chooses the nodes")
    if not isinstance(plan, dict):
        raise _fail(where, "plan", plan, "an object or null")
    raw_roles, domain = plan.get("roles"), plan.get("domain", "")
    if not isinstance(raw_roles, list):
        raise _fail(where, "plan.roles", raw_roles, "a list of roles")
    if not isinstance(domain, str):
        raise _fail(where, "plan.domain", domain, "a switch name")
    roles = tuple(_role(raw, where, i) for i, raw in enumerate(raw_roles))
    names = [r.node for r in roles]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise _fail(where, "plan.roles", twice, "each node named once")
    return PlacementRecord(summary, roles, domain)


def read_placement_record(path: Path) -> PlacementRecord:
    """The placement record in ``path``; a one-line error when it is unreadable or malformed."""
    try:
        data: Any = json.loads(path.read_text(encoding="utf-8"))
    except OSError as err:
        raise UserInputError(f"{path}: cannot read the placement ({err.strerror})") from None
    except (ValueError, RecursionError) as err:  # UnicodeDecodeError is a ValueError
        raise UserInputError(f"{path}: not valid JSON ({err})") from None
    return placement_record(data, str(path))
