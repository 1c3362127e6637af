"""``gantry preflight``: health checks on this node; exit 0: passes (WARN allowed, and ERROR: a
setup error of gantry's own install, which is not the node's fault), 1: fails.

With ``--drain`` (used by the HealthCheckProgram and Prolog/Epilog scripts) the node's own
result is applied through the drain policy: drained with an owned ``gantry:`` reason on
FAIL, resumed after K clean passes if gantry drained it, an operator's reason never touched.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from launcher.commands import fabric, gate
from launcher.errors import EXIT_FAILURE, EXIT_OK
from launcher.preflight.levels import LEVELS

if TYPE_CHECKING:  # the checks and their collectors load when preflight runs
    from launcher.preflight.runner import RunOptions
    from launcher.preflight.verdict import NodeVerdict
    from launcher.site_config import LoadedSite


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "preflight",
        help="run health checks on this node",
        description="Collect GPU/network/host facts once, compare them with the site's "
        "thresholds, print every check (observed vs expected). Exit 0: pass (warnings "
        "allowed; a check that gantry's own install cannot run is an ERROR, not the node's "
        "fault); 1: the node must not run jobs.",
    )
    parser.add_argument(
        "--level",
        choices=LEVELS,
        default=None,
        help="quick: passive checks; standard: + GEMM/bandwidth tests; "
        "deep: + NCCL / MPI tests (default: the site's preflight.level)",
    )
    parser.add_argument("--json", action="store_true", help="print the verdict as JSON")
    parser.add_argument(
        "--site", type=Path, default=None, help="site config (default: site_configs/local.yaml)"
    )
    parser.add_argument(
        "--drain",
        action="store_true",
        help="apply the drain policy to this node (health-check/prolog mode)",
    )
    parser.add_argument("--quiet", action="store_true", help="print nothing, only exit status")
    parser.set_defaults(func=run)
    actions = parser.add_subparsers(dest="preflight_action", metavar="ACTION", required=False)
    gate.register_alias(actions)
    fabric.register_alias(actions)


def options_for(site: LoadedSite, level: str | None) -> RunOptions:
    """The run's options; counter baselines are read from the state dir when it is trusted
    and saved there only by its writer (launcher/preflight/state_access.py)."""
    from launcher.preflight.context import Expectations
    from launcher.preflight.runner import RunOptions
    from launcher.preflight.state import state_dir
    from launcher.preflight.state_access import state_access
    from launcher.preflight.thresholds import make_thresholds

    cfg = site.config
    access = state_access(state_dir(site))
    if not access.read:
        sys.stderr.write(f"warning: preflight state dir not used: {access.problem} "
                         "(counter growth is not checked; see docs/preflight.md)\n")
    return RunOptions(
        level=(level or cfg.preflight.level),  # type: ignore[arg-type]
        expectations=Expectations.from_site(cfg),
        thresholds=make_thresholds(cfg.preflight.thresholds),
        state_dir=access.root if access.read else None,
        mpi_env=cfg.mpi.env,
        save_baselines=access.write,
    )


def print_verdict(verdict: NodeVerdict) -> None:
    """A rich table on a terminal; one plain line per check when piped (job logs)."""
    from rich.table import Table

    from launcher.console import make_console

    console = make_console()
    title = (
        f"preflight {verdict.node} ({verdict.level}): {verdict.status} "
        f"in {verdict.duration_s:.2f} s"
    )
    if console.is_terminal:
        table = Table(title=title)
        for column in ("check", "status", "observed", "expected / reason", "action"):
            table.add_column(column)
        for c in verdict.checks:
            skip = c.status == "SKIP"
            table.add_row(
                c.id,
                c.status,
                "" if skip else c.observed,
                c.reason if skip else c.expected,
                c.action if c.status in ("WARN", "FAIL", "ERROR") else "",
            )
        console.print(table)
    else:
        console.print(title)
        for c in verdict.checks:
            if c.status == "SKIP":
                console.print(f"  SKIP {c.id}: {c.reason}")
                continue
            line = f"  {c.status} {c.id}: {c.observed} (expected {c.expected})"
            if c.status in ("WARN", "FAIL", "ERROR") and c.action:
                line += f" -> {c.action}"
            console.print(line)
    reason = verdict.drain_reason()
    if reason:
        console.print(f"node {verdict.node} FAILS preflight: {reason}")
    for c in verdict.setup_errors():
        console.print(f"setup error (gantry's install, not node {verdict.node}): {c.id} could "
                      f"not run: {c.action}", markup=False)


def run(args: argparse.Namespace) -> int:
    import json

    from launcher.preflight.runner import run_preflight
    from launcher.site_config import load_site

    site = load_site(args.site)
    verdict, hung = run_preflight(options_for(site, args.level))
    if args.drain:
        from launcher.preflight.node_policy import apply_node_policy

        apply_node_policy(site, verdict, quiet=args.quiet)
    if args.json:
        json.dump(verdict.to_dict(), sys.stdout, sort_keys=True)
        sys.stdout.write("\n")
    elif not args.quiet:
        print_verdict(verdict)
    code = EXIT_FAILURE if verdict.status == "FAIL" else EXIT_OK
    if hung:  # a collector thread is stuck in a tool/library call: do not wait for it
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    return code
