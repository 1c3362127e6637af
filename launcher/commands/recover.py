"""``gantry recover``: after a failed step, pin it on its nodes, swap in spares or requeue.

Exit 0: relaunch on the nodes written to --nodes-out; 75: the job was requeued (the script
stops quietly); 3: neither (nothing left to run on and requeue off or used up); 2: bad
input; 1: recover itself failed (the script then takes the requeue path).
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from launcher.errors import EXIT_OK, GantryError, UserInputError
from launcher.preflight.levels import LEVELS

if TYPE_CHECKING:  # the site schema loads when a recovery runs
    from launcher.site_config import LoadedSite

EXIT_REQUEUED = 75
EXIT_NOTHING_TO_RUN = 3


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "recover",
        help="after a failed training step: drain its culprit nodes, put spares in their "
        "places or requeue",
        description=__doc__,
    )
    parser.add_argument("--site", type=Path, default=None, help="site config")
    parser.add_argument("--job-dir", type=Path, required=True, help="the job directory")
    parser.add_argument("--attempt-dir", type=Path, required=True,
                        help="the failed step's attempt directory")
    parser.add_argument("--launch-nodes", default=None,
                        help="nodes the step ran on (default: ATTEMPT_DIR/launch_nodes)")
    parser.add_argument("--step-rc", type=int, default=1, help="the step's exit status")
    parser.add_argument("--job-id", default=None, help="default: $SLURM_JOB_ID")
    parser.add_argument("--level", choices=LEVELS, default="quick",
                        help="preflight level the replacements must pass (default quick)")
    parser.add_argument("--no-relaunch", action="store_true",
                        help="in-allocation recoveries are used up: drain and requeue only")
    parser.add_argument("--no-requeue", action="store_true",
                        help="never requeue (requeue off or restarts used up)")
    parser.add_argument("--nodes-out", type=Path, required=True,
                        help="write the next launch's nodes (n1,n2,n5) here on relaunch")
    parser.set_defaults(func=run)


def _health_check(site: LoadedSite, level: str) -> Any:
    def check(nodes: list[str]) -> list[str]:
        if level == "off" or not nodes:
            return list(nodes)
        from launcher.preflight.gate import run_gate

        report = run_gate(site, nodes, len(nodes), level, None, requeue=False,
                          timeout_s=site.config.preflight.gate_timeout_s)
        return [o.node for o in report.outcomes if o.status in ("PASS", "WARN")]
    return check


def run(args: argparse.Namespace) -> int:
    import json

    from launcher.atomic_write import WriteError, write_text
    from launcher.console import make_console
    from launcher.job_dir import LAUNCH_NODES_FILE
    from launcher.recovery.node_faults import append_recovery
    from launcher.recovery.recover import plan_of, recover
    from launcher.site_config import load_site
    from launcher.site_topology import site_topology
    from topology import hostlists

    started = time.monotonic()
    site = load_site(args.site)
    job_id = args.job_id or os.environ.get("SLURM_JOB_ID") or None
    listed = args.launch_nodes
    if listed is None:
        try:
            listed = (args.attempt_dir / LAUNCH_NODES_FILE).read_text(encoding="utf-8").strip()
        except OSError as err:
            raise UserInputError(f"{args.attempt_dir}/{LAUNCH_NODES_FILE}: cannot read it "
                                 f"({err.strerror}); pass --launch-nodes") from None
    launch = [n for part in listed.split(",") if part
              for n in hostlists.expand(part, "--launch-nodes")]
    if not launch:
        raise UserInputError("--launch-nodes: no node named (expected the step's nodes, "
                             "e.g. n1,n2)")
    if job_id is not None and not re.fullmatch(r"[0-9]{1,18}(_[0-9]{1,9})?", job_id,
                                                re.ASCII):
        raise UserInputError(f"--job-id: {job_id[:40]!r} is not a Slurm job id")
    if not 0 <= args.step_rc <= 255:
        raise UserInputError(f"--step-rc: {args.step_rc} is not an exit status (0 .. 255)")
    if not args.attempt_dir.is_dir():
        raise UserInputError(f"--attempt-dir {args.attempt_dir}: not a directory")
    out_dir = args.nodes_out.parent
    if not out_dir.is_dir() or not os.access(out_dir, os.W_OK):
        raise UserInputError(f"--nodes-out {args.nodes_out}: its directory cannot be written")
    try:
        topology = site_topology(site)
    except GantryError:
        topology = None
    outcome = recover(site, args.job_dir, args.attempt_dir, launch, job_id,
                      _health_check(site, args.level),
                      relaunch=not args.no_relaunch, requeue=not args.no_requeue,
                      topology=topology, plan=plan_of(args.job_dir))
    record = outcome.record(args.attempt_dir.name, args.step_rc, time.monotonic() - started,
                            args.level)
    try:
        append_recovery(args.job_dir, record)
    except OSError as err:
        sys.stderr.write(f"warning: {args.job_dir}: cannot record the recovery ({err})\n")
    console = make_console(stderr=True)
    console.print(f"gantry recover: {outcome.finding.evidence}")
    for note in outcome.notes:
        console.print(f"gantry recover: {note}")
    console.print(f"gantry recover: {outcome.message}")
    if outcome.decision == "relaunch":
        try:
            write_text(args.nodes_out, ",".join(outcome.nodes) + "\n")
        except WriteError as err:
            raise GantryError(f"--nodes-out: {err}") from None
        print(json.dumps(record, sort_keys=True))
        return EXIT_OK
    print(json.dumps(record, sort_keys=True))
    return EXIT_REQUEUED if outcome.decision == "requeue" else EXIT_NOTHING_TO_RUN
