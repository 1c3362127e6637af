"""`gantry demo`: gantry's whole job on the embedded cluster, unattended (the README's main
command): cluster, build, data, fault drill, submit + live view, report. See launcher/demo."""

from __future__ import annotations

import argparse
from pathlib import Path

from launcher.errors import EXIT_FAILURE, EXIT_OK


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "demo",
        help="run gantry's whole job on the embedded cluster (the README's main command)",
        description="Bring the embedded cluster up, build the native trainer for the site, "
        "make token shards from the repository's docs, break one planned node (fake sysfs: "
        "its InfiniBand port is down), submit a pp 2 x dp 2 GPT-2 job on 4 nodes + 1 spare "
        "and follow it live (the preflight gate drains the broken node and the spare takes "
        "over), then write the report. The cluster stays up.",
    )
    parser.add_argument("--site", type=Path, default=None, metavar="PATH",
                        help="embedded site config (its run dir and ports; default: "
                             "site_configs/local.yaml)")
    parser.add_argument("--work-dir", type=Path, default=None, metavar="DIR",
                        help="where the demo's data, job spec and jobs go (default: "
                             "<cluster run dir>/demo)")
    parser.add_argument("--steps", type=int, default=60, metavar="N",
                        help="training steps (default 60)")
    parser.add_argument("--faulty", default=None, metavar="NODE",
                        help="node to break (default: the second planned node)")
    parser.add_argument("--timeout", type=float, default=600.0, metavar="SECONDS",
                        help="cancel the training job if it runs longer (default 600)")
    parser.add_argument("--keep-drained", action="store_true",
                        help="leave the broken node drained at the end")
    parser.add_argument("--json", action="store_true",
                        help="print the result as JSON (the progress goes to stderr)")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from launcher.console import make_console, print_json
    from launcher.demo.run import DemoOptions, run_demo

    console = make_console(stderr=args.json)
    result = run_demo(DemoOptions(args.site, args.work_dir, args.steps, args.faulty,
                                  not args.keep_drained, args.timeout), console)
    if args.json:
        print_json(result.to_json())
    ok = result.summary is not None and result.summary.state == "COMPLETED"
    return EXIT_OK if ok else EXIT_FAILURE
