"""``gantry gate``: the launch gate used inside the generated sbatch script.

``gantry preflight gate`` is an alias (the generated script calls it so): :func:`register_alias`
adds it under ``gantry preflight`` with this module's options and handler.

Runs preflight on all allocated nodes at once, drains failed nodes (owned reason), and
decides: exit 0 "go" (prints the node list to run on, or writes it to --nodes-out /
--nodelist-out; with --placement the planned nodes that passed, healthy spares in the places
of the others), exit 75 "requeued" (the job was requeued excluding the bad nodes; the script
should exit), exit 1 "abort". With --fabric, the nodes the fabric test's record names (a slow
node, the two ends of a slow link) fail as a node check does; --passed-out only lists the
nodes that passed the node checks (the fabric test's nodes) and changes nothing; --record
writes the report.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from launcher.errors import EXIT_FAILURE, EXIT_OK, GantryError, UserInputError, brief
from launcher.preflight.levels import LEVELS
from topology.user_files import require_regular_file, require_writable_file

if TYPE_CHECKING:  # the gate (placement, Slurm) loads when it runs, not when it registers
    from launcher.preflight.fabric_judge import FabricVerdict
    from launcher.preflight.gate import GateReport
    from launcher.site_config import LoadedSite

EXIT_REQUEUED = 75
"""EX_TEMPFAIL: the job was requeued; the batch script should stop quietly."""


def register(subparsers: Any) -> None:
    _add_gate(subparsers, "preflight all allocated nodes, drain bad ones, go on or requeue")


def register_alias(preflight_actions: Any) -> None:
    """``gantry preflight gate``: an alias of ``gantry gate``, same options and handler."""
    _add_gate(preflight_actions, "alias of `gantry gate`")


def _add_gate(subparsers: Any, help_text: str) -> None:
    parser = subparsers.add_parser("gate", help=help_text, description=DESCRIPTION)
    _add_gate_arguments(parser)
    parser.set_defaults(func=run)


DESCRIPTION = (
    "Inside an allocation: run `gantry preflight` on every node at once (srun, one task per "
    "node) or read the verdicts of a step the script already ran (--reports), drain failed "
    "nodes with a gantry: reason, then go on with the healthy nodes (exit 0) or requeue the "
    "job excluding the bad ones (exit 75); exit 1 when it cannot do either."
)


def _add_gate_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of `gantry gate` (and of its alias `gantry preflight gate`)."""
    parser.add_argument("--site", type=Path, default=None, help="site config")
    parser.add_argument("--level", choices=LEVELS, default=None, help="preflight level")
    parser.add_argument(
        "--nodes", default=None, help="hostlist to check (default: $SLURM_JOB_NODELIST)"
    )
    parser.add_argument("--job-id", default=None, help="job to requeue (default: $SLURM_JOB_ID)")
    parser.add_argument(
        "--reports",
        type=Path,
        default=None,
        help="verdicts already collected (srun output of `gantry preflight --json`, labelled "
        "or one JSON line per node) instead of running srun",
    )
    parser.add_argument(
        "--placement",
        type=Path,
        default=None,
        help="the job's placement.json (written by gantry submit): keep the planned rank nodes "
        "that pass and put healthy spares in the places of the others",
    )
    group = parser.add_mutually_exclusive_group()
    group.add_argument(
        "--need",
        type=int,
        default=None,
        help="nodes the job needs (default: all allocated minus --spares)",
    )
    group.add_argument("--spares", type=int, default=0, help="allocated nodes that may be lost")
    parser.add_argument(
        "--no-requeue", action="store_true", help="report the requeue decision without requeuing"
    )
    parser.add_argument(
        "--nodelist-out",
        type=Path,
        default=None,
        help="write the chosen hostlist (compressed, e.g. n[1-2,5]) to this file on go",
    )
    parser.add_argument(
        "--nodes-out",
        type=Path,
        default=None,
        help="write the chosen nodes comma-separated (n1,n2,n5) to this file on go",
    )
    parser.add_argument(
        "--fabric",
        type=Path,
        default=None,
        help="the fabric test's output (`gantry preflight fabric` over the nodes that passed): "
        "the nodes it names fail like a node check",
    )
    parser.add_argument(
        "--passed-out",
        type=Path,
        default=None,
        help="only write the nodes that passed the node checks of --reports to this file "
        "(comma-separated) and exit 0: nothing drained, nothing decided",
    )
    parser.add_argument(
        "--record",
        type=Path,
        default=None,
        help="also write the report as JSON to this file (the attempt's gate record)",
    )
    parser.add_argument("--json", action="store_true", help="print the report as JSON")


def print_report(report: GateReport) -> None:
    from launcher.console import make_console

    console = make_console(stderr=True)
    console.print(
        f"gantry gate: preflight on {len(report.outcomes)} nodes in {report.preflight_s:.2f} s"
    )
    actions = {a.node: a for a in report.actions}
    for o in report.outcomes:
        a = actions.get(o.node)
        act = f"{a.kind} ({a.note})" if a else "-"
        why = o.reason or (f"setup error: {', '.join(o.setup_errors)}" if o.setup_errors else "")
        console.print(f"  {o.node:<12} {o.status:<7} {why:<48} {act}")
    for key, problem in report.problems.items():
        console.print(f"  problem {key}: {problem}")
    console.print(f"gantry gate: {report.decision.message}")
    if report.requeue_steps:
        console.print(f"gantry gate: requeue steps: {', '.join(report.requeue_steps)}")


SHOWN_ACTIONS = 4
"""Drains (resumes) an error line names one by one; more are counted."""


def what_was_done(report: GateReport, state: Path) -> str:
    """The gate's decision and its drains and resumes, for an error after they happened."""
    from topology import hostlists

    done = []
    for kind, verb in (("drain", "drained"), ("resume", "resumed")):
        acted = [f"{a.node} ({a.reason})" if kind == "drain" else a.node
                 for a in report.actions if a.kind == kind]
        if acted:
            more = len(acted) - SHOWN_ACTIONS
            done.append(f"{verb} {', '.join(acted[:SHOWN_ACTIONS])}"
                        + (f" and {more} more" if more > 0 else ""))
    nodes = hostlists.collect(report.decision.nodes)
    if not done:
        return f"the gate had decided go on {nodes} and changed no node"
    return f"the gate had decided go on {nodes} and {' and '.join(done)}, as recorded in {state}"


def _write_passed(args: argparse.Namespace, nodes: list[str], reports: str | None) -> int:
    """--passed-out: the nodes that passed the node checks, nothing else."""
    from launcher.atomic_write import write_text
    from launcher.preflight.gate import passed_nodes

    if reports is None:
        raise UserInputError("gate: --passed-out needs --reports (the preflight step's output)")
    passed = passed_nodes(nodes, reports)
    write_text(args.passed_out, ",".join(passed) + "\n", mode=0o644, label="--passed-out")
    return EXIT_OK


def _fabric(path: Path | None, site: LoadedSite) -> FabricVerdict | None:
    """The fabric test's verdict from its output file (None without --fabric); a missing or
    empty file is a test that gave no record (the step failed), not bad input."""
    if path is None:
        return None
    from launcher.preflight.gate import fabric_verdict

    try:
        text = path.read_text(encoding="utf-8", errors="replace") if path.is_file() else ""
    except OSError as err:
        text = f"cannot read ({err.strerror})"
    return fabric_verdict(site, text, str(path))


def run(args: argparse.Namespace) -> int:
    import json

    from launcher.atomic_write import FileSet, WriteError, write_text
    from launcher.preflight.gate import run_gate
    from launcher.preflight.gate_plan import read_node_plan
    from launcher.preflight.state import state_dir
    from launcher.site_config import load_site
    from topology import hostlists

    site = load_site(args.site)
    nodes_expr = args.nodes or os.environ.get("SLURM_JOB_NODELIST", "")
    if not nodes_expr:
        raise UserInputError("gate: no nodes (pass --nodes or run inside an allocation)")
    nodes = hostlists.expand(nodes_expr, "--nodes")
    if args.need is not None:
        need = args.need
        if not 1 <= need <= len(nodes):
            raise UserInputError(
                f"gate: --need {need} is not allowed (expected 1..{len(nodes)} for {nodes_expr})"
            )
    else:
        if not 0 <= args.spares < len(nodes):
            raise UserInputError(
                f"gate: --spares {args.spares} is not allowed "
                f"(expected 0..{len(nodes) - 1} for {nodes_expr})"
            )
        need = len(nodes) - args.spares
    job_id = args.job_id or os.environ.get("SLURM_JOB_ID") or None
    if job_id is not None and not re.fullmatch(r"\d+(?:[_+]\d+)?", job_id, re.ASCII):
        source = "--job-id" if args.job_id else "$SLURM_JOB_ID"
        raise UserInputError(f"gate: {source} {brief(job_id)} is not allowed (expected a Slurm "
                             "job id, e.g. 1234 or 1234_7)")
    for flag, out in (("--nodelist-out", args.nodelist_out), ("--nodes-out", args.nodes_out)):
        if out is not None:  # before any node is drained or the job requeued
            require_writable_file(out, flag)
    reports = None
    if args.reports is not None:
        require_regular_file(args.reports, "the preflight step's output")
        try:
            reports = args.reports.read_text(encoding="utf-8", errors="replace")
        except OSError as err:
            raise UserInputError(f"{args.reports}: cannot read ({err.strerror})") from None
    if args.passed_out is not None:
        return _write_passed(args, nodes, reports)
    for flag, out in (("--record", args.record),):
        if out is not None:
            require_writable_file(out, flag)
    fabric = _fabric(args.fabric, site)
    plan = read_node_plan(args.placement) if args.placement is not None else None
    report = run_gate(
        site,
        nodes,
        need,
        args.level or site.config.preflight.level,
        job_id,
        requeue=not args.no_requeue,
        timeout_s=site.config.preflight.gate_timeout_s,
        reports=reports,
        plan=plan,
        fabric=fabric,
    )
    print_report(report)
    if args.json:
        json.dump(report.to_dict(), sys.stdout, indent=2, sort_keys=True)
        sys.stdout.write("\n")
    if args.record is not None:
        try:
            write_text(args.record, json.dumps(report.to_dict(), indent=2, sort_keys=True)
                       + "\n", mode=0o644, label="--record")
        except WriteError as err:  # the drains are done: say so, and do not let the job run
            raise GantryError(f"{err}; {what_was_done(report, state_dir(site))}: "
                              "the job does not run") from None
    decision = report.decision.decision
    if decision == "go":
        try:
            with FileSet() as files:  # both files or neither
                if args.nodelist_out is not None:
                    files.write_text(args.nodelist_out,
                                     hostlists.collect(report.decision.nodes) + "\n",
                                     label="--nodelist-out")
                if args.nodes_out is not None:
                    files.write_text(args.nodes_out, ",".join(report.decision.nodes) + "\n",
                                     label="--nodes-out")
        except WriteError as err:  # the drains are done: say so, and do not let the job run
            raise GantryError(f"{err}; {what_was_done(report, state_dir(site))}: "
                              "the job does not run") from None
        if not (args.json or args.nodelist_out or args.nodes_out):  # else the files say it
            sys.stdout.write(hostlists.collect(report.decision.nodes) + "\n")
        return EXIT_OK
    if decision == "requeue":
        return EXIT_REQUEUED
    return EXIT_FAILURE
