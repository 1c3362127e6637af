"""One node applies the drain policy to itself (HealthCheckProgram, Prolog/Epilog mode)."""

from __future__ import annotations

import sys

from launcher.preflight.policy_apply import apply_policy
from launcher.preflight.slurm_nodes import Scontrol
from launcher.preflight.state import state_dir
from launcher.preflight.state_access import state_access
from launcher.preflight.verdict import NodeVerdict
from launcher.site_config import LoadedSite


def apply_node_policy(site: LoadedSite, verdict: NodeVerdict, quiet: bool = False) -> None:
    """Drain this node on FAIL (owned reason), resume gantry's own drain after K passes (a
    setup error, status ERROR, does neither); only as the state dir's writer (root's Slurm
    scripts in the safe layout): the policy acts on the history it keeps there, which nobody
    else may have written."""
    if verdict.status == "ERROR":  # gantry's setup error: neither a drain nor a clean pass
        if not quiet:
            sys.stderr.write(f"gantry preflight: {verdict.node}: keep (setup error of gantry's "
                             "install, not the node's: the drain policy is not applied)\n")
        return
    access = state_access(state_dir(site))
    if not access.write:
        sys.stderr.write(f"warning: gantry preflight: {verdict.node}: drain policy not applied: "
                         f"{access.problem} (see docs/preflight.md)\n")
        return
    actions = apply_policy(site, {verdict.node: verdict.drain_reason()}, Scontrol())
    if not quiet:
        for a in actions:
            sys.stderr.write(f"gantry preflight: {a.node}: {a.kind} {a.reason} ({a.note})\n")
