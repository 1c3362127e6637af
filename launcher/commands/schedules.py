"""`gantry schedules`: every pipeline schedule side by side for one layout, in theory (bubble,
step length, activations held per rank, a timeline per rank), to choose one before a job."""

from __future__ import annotations

import argparse
import typing
from pathlib import Path
from typing import TYPE_CHECKING, Any

from launcher.errors import EXIT_OK, UserInputError
from launcher.schedule_names import Schedule

if TYPE_CHECKING:  # the schedule generators (numpy) and rich load when schedules are compared
    from launcher.schedules.compare import ScheduleRow
    from launcher.schedules.table import Op

SCHEDULES: tuple[str, ...] = typing.get_args(Schedule)
"""launcher.schedules.SCHEDULES, as the job spec spells them (a test holds them equal)."""


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "schedules", help="compare the pipeline schedules for a layout, in theory",
        description=f"Run every schedule's action table ({', '.join(SCHEDULES)}) on the "
                    "abstract machine the executor's tables are proven on: bubble (idle share "
                    "of all ranks), step length in cost units, the activations each rank holds "
                    "at most (in micro-batches through all its layers; a chunk of an "
                    "interleaved schedule counts 1/v). Costs default to "
                    "F = B = W = 1 (B: backward to the input; a full backward is B + W); give "
                    "measured ones with --costs (e.g. from `gantry report`).")
    parser.add_argument("--job", type=Path, default=None, metavar="YAML",
                        help="take pp, micro_batches and virtual_stages from a job spec")
    parser.add_argument("--pp", type=int, default=None, help="pipeline ranks (default 2)")
    parser.add_argument("--micro-batches", "-m", type=int, default=None,
                        help="micro-batches per step (default 8)")
    parser.add_argument("--virtual-stages", "-v", type=int, default=None,
                        help="chunks per rank of the interleaved schedules (default 2)")
    parser.add_argument("--costs", default="", metavar="F=..,B=..,W=..",
                        help="op costs relative to each other (default F=1,B=1,W=1)")
    parser.add_argument("--trace", type=Path, default=None, metavar="TRACE_JSON",
                        help="take the op costs (ms per stage) from a run's trace.json (a "
                             "full backward splits evenly into B and W); --costs overrides")
    parser.add_argument("--timeline", action="store_true",
                        help="also draw each schedule's ranks over time (F/B/W + micro-batch)")
    parser.add_argument("--width", type=int, default=96, help="timeline width in characters")
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    parser.set_defaults(func=run)


def _layout(args: argparse.Namespace) -> tuple[int, int, int]:
    pp, m, v = 2, 8, 2
    if args.job is not None:
        from launcher.job_spec import load_job

        par = load_job(args.job).parallelism
        pp, m, v = par.pp, par.micro_batches, max(par.virtual_stages, 2)
    pp = args.pp if args.pp is not None else pp
    m = args.micro_batches if args.micro_batches is not None else m
    v = args.virtual_stages if args.virtual_stages is not None else v
    for flag, value, low in (("--pp", pp, 1), ("--micro-batches", m, 1),
                             ("--virtual-stages", v, 2)):
        if not low <= value <= 4096:
            raise UserInputError(f"{flag}: {value} is not allowed (expected {low}..4096)")
    if pp * m * v > 65536:
        raise UserInputError(f"--pp x --micro-batches x --virtual-stages: {pp * m * v} actions "
                             "per rank and chunk is too many (expected at most 65536)")
    return pp, m, v


def _row_json(row: ScheduleRow, width: int, with_timeline: bool) -> dict[str, Any]:
    from launcher.schedules.compare import timeline

    out: dict[str, Any] = {"schedule": row.schedule, "virtual_stages": row.virtual_stages}
    if row.error is not None:
        return {**out, "error": row.error}
    out.update(bubble=round(row.bubble or 0.0, 6), makespan=row.makespan,
               peak_in_flight=list(row.peak_in_flight),
               activations_held=[n / row.virtual_stages for n in row.peak_in_flight])
    if with_timeline and row.result is not None:
        out["timeline"] = timeline(row.result, width)
    return out


def trace_costs(path: Path) -> dict[Op, float]:
    """Mean ms of F, B (input) and W per full stage in a gantry trace.json (each rank's
    chunks count as its stages: a chunk's time x the chunks the rank ran); a full backward
    is split evenly into B and W."""
    from launcher.report.run_data import read_trace
    from launcher.report.theory import measured_op_costs
    from launcher.schedules.compare import COST_KEYS, split_full_backward
    from launcher.schedules.table import Op

    events = read_trace(path)
    if not events:
        raise UserInputError(f"--trace: {path} has no compute events (expected a gantry "
                             "trace.json)")
    chunks: dict[int, set[int]] = {}
    for event in events:
        chunks.setdefault(event.rank, set()).add(event.stage)
    measured = split_full_backward(
        measured_op_costs(events, max(len(s) for s in chunks.values())))
    if Op.FORWARD not in measured or Op.BACKWARD_INPUT not in measured:
        raise UserInputError(f"--trace: {path} has no forward and backward ops")
    costs = {op: measured[op] * 1e3 for op in COST_KEYS.values() if op in measured}
    empty = [op.name.lower() for op, ms in costs.items() if not ms > 0]
    if empty:
        raise UserInputError(f"--trace: {path}: the {empty[0]} ops last 0 ms (expected op "
                             "costs > 0, as --costs)")
    return costs


def _label(row: ScheduleRow) -> str:
    return f"{row.schedule} (v={row.virtual_stages})" if row.virtual_stages > 1 else row.schedule


def run(args: argparse.Namespace) -> int:
    from rich.table import Table

    from launcher.console import make_console, print_json
    from launcher.schedules import ScheduleError
    from launcher.schedules.compare import COST_KEYS, compare, parse_costs, timeline

    pp, m, v = _layout(args)
    try:
        given = parse_costs(args.costs)
    except ValueError as err:
        raise UserInputError(f"--costs: {err}") from None
    if not 8 <= args.width <= 1000:
        raise UserInputError(f"--width: {args.width} is not allowed (expected 8..1000)")
    costs = {op: 1.0 for op in COST_KEYS.values()}
    if args.trace is not None:
        costs.update(trace_costs(args.trace))
    costs.update(given)
    by_letter = {letter: costs[op] for letter, op in COST_KEYS.items()}
    try:
        rows = compare(pp, m, v, costs)
    except ScheduleError as err:
        raise UserInputError(str(err)) from None
    if args.json:
        print_json({"pp": pp, "micro_batches": m, "virtual_stages": v,
                    "costs": by_letter,
                    "schedules": [_row_json(r, args.width, args.timeline) for r in rows]})
        return EXIT_OK
    console = make_console()
    table = Table(title=f"pp={pp}, {m} micro-batches, costs "
                        + " ".join(f"{letter}={cost:g}" for letter, cost in by_letter.items()))
    for column in ("schedule", "bubble", "step (cost units)",
                   "activations held per rank (micro-batches x its layers)"):
        table.add_column(column)
    for row in rows:
        if row.error is not None:
            table.add_row(_label(row), "-", "-", f"not possible: {row.error}")
            continue
        table.add_row(_label(row), f"{(row.bubble or 0.0) * 100:.1f}%", f"{row.makespan:g}",
                      " / ".join(f"{n / row.virtual_stages:g}" for n in row.peak_in_flight))
    console.print(table)
    if args.timeline:
        for row in rows:
            if row.result is None:
                continue
            console.print(f"\n{_label(row)}")
            for rank, line in enumerate(timeline(row.result, args.width)):
                console.print(f"  rank {rank} |{line}|", markup=False)
    return EXIT_OK

