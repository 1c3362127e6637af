"""Applies the drain policy for real: read node states, plan, scontrol drain/resume, remember.

Each drain or resume re-reads its node first and is skipped when the reason Slurm now holds
is not gantry's own (an operator drained it since the first read).

Shared by the gate (all nodes of a job) and ``gantry preflight --drain`` (one node, from the
HealthCheckProgram or Prolog/Epilog). Decisions are serialised by a lock in the state dir.
"""

from __future__ import annotations

import time
from collections.abc import Mapping

from launcher.errors import GantryError
from launcher.preflight.drain_policy import Action, PolicyConfig, plan
from launcher.preflight.slurm_nodes import Scontrol
from launcher.preflight.state import (
    all_histories,
    load_history,
    policy_lock,
    save_history,
    state_dir,
)
from launcher.site_config import LoadedSite


def apply_policy(
    site: LoadedSite,
    outcomes: Mapping[str, str | None],
    scontrol: Scontrol,
    now: float | None = None,
) -> list[Action]:
    """Drain/resume per the policy; a failed scontrol call is reported in the action's note."""
    root = state_dir(site)
    pf = site.config.preflight
    with policy_lock(root):
        states = scontrol.nodes()
        cfg = PolicyConfig(
            enabled=pf.drain,
            resume_after_passes=pf.resume_after_passes,
            max_drain_fraction=pf.max_drain_fraction,
            drain_window_s=pf.drain_window_s,
            cluster_size=max(1, len(states)),
        )
        histories = {n: load_history(root, n) for n in outcomes}
        actions, updated = plan(
            outcomes,
            states,
            histories,
            all_histories(root),
            cfg,
            time.time() if now is None else now,
        )
        done = []
        for action in actions:
            try:
                done_now = True
                if action.kind == "drain":
                    done_now = scontrol.drain(action.node, action.reason)
                elif action.kind == "resume":
                    done_now = scontrol.resume(action.node)
                if not done_now:
                    updated[action.node] = load_history(root, action.node)  # nothing changed
                    action = Action(action.node, "keep", action.reason,
                                    f"{action.kind} skipped: a fresh read shows a reason that "
                                    "is not gantry's own (left to the operator)")
            except GantryError as err:
                updated[action.node] = load_history(root, action.node)  # nothing changed
                action = Action(action.node, "keep", action.reason, f"{action.kind} failed: {err}")
            done.append(action)
        for hist in updated.values():
            save_history(root, hist)
    return done
