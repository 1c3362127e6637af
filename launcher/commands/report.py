"""`gantry report JOB`: loss curve, pipeline timeline (measured vs theoretical bubble) as PNG
and self-contained HTML, plus the Perfetto trace, from a job's run directories."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from launcher.errors import EXIT_OK, UserInputError
from launcher.job_cli import add_jobs_dir_arg
from topology.user_files import require_output_dir, require_short_names


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "report", help="plot a training run: loss, pipeline timeline, bubble; HTML + PNG",
        description="Read a job's metrics.jsonl and trace.json (all attempts) and write "
                    "loss.png, timeline.png, report.html (self-contained) and trace.json "
                    "(open it in Perfetto) into the job's report/ directory.")
    parser.add_argument("job_ref", metavar="JOB",
                        help="job id, job directory or name, or a run directory holding "
                             "metrics.jsonl")
    add_jobs_dir_arg(parser)
    parser.add_argument("--spec", type=Path, default=None, metavar="YAML",
                        help="job spec for the theoretical bubble (default: the job's "
                             "spec.yaml)")
    parser.add_argument("--out", type=Path, default=None, metavar="DIR",
                        help="report directory (default: <job dir>/report, or "
                             "<run dir>/report)")
    parser.add_argument("--step", type=int, default=None, metavar="N",
                        help="step the timeline shows (default: a typical one)")
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from launcher.console import make_console, print_json
    from launcher.report.build import build_report
    from launcher.report.checkpoints import describe as describe_checkpoints
    from launcher.report.sources import resolve_sources

    require_short_names(Path(args.job_ref), "JOB")
    if args.spec is not None:
        require_short_names(args.spec, "--spec")
    if args.out is not None:
        require_output_dir(args.out, "--out")
    if args.step is not None and args.step < 1:
        raise UserInputError(f"--step: {args.step} is not allowed (expected a step >= 1)")
    result = build_report(resolve_sources(args.job_ref, args.jobs_dir, args.spec), args.out,
                          args.step)
    if args.json:
        print_json(result.to_json())
        return EXIT_OK
    console = make_console()
    bubble = "-" if result.measured_bubble is None else f"{result.measured_bubble:.1%}"
    theory = "" if result.theory is None else (
        f", theory {result.theory.fraction:.1%} for {result.theory.describe()}" + (
            "" if result.theory.with_measured_costs is None else
            f" ({result.theory.with_measured_costs:.1%} at measured op times)"))
    console.print(f"{result.steps} steps: loss {result.first_loss:.4f} → {result.last_loss:.4f}"
                  f", {result.median_tokens_per_s:,.0f} tokens/s (median), bubble {bubble}"
                  f"{theory}", markup=False)
    if result.checkpoints:
        console.print(f"  checkpoints: {describe_checkpoints(list(result.checkpoints))}",
                      markup=False)
    if result.goodput is not None:
        from launcher.report.goodput import describe_lines

        for line in describe_lines(result.goodput):
            console.print(f"  goodput: {line}", markup=False)
    if result.efficiency is not None:
        if result.efficiency.mfu is not None:
            console.print(f"  MFU: {result.efficiency.mfu.describe()}", markup=False)
        console.print(f"  checkpoint interval (Young/Daly): "
                      f"{result.efficiency.checkpoint.describe()}", markup=False)
    for label, path in (("html", result.html), ("loss", result.loss_png),
                        ("timeline", result.timeline_png), ("trace", result.trace)):
        if path is not None:
            console.print(f"  {label:<9}{path}", markup=False)
    for note in result.notes:
        console.print(f"  note: {note}", markup=False)
    return EXIT_OK
