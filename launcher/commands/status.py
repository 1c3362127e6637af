"""`gantry status [JOB...]`: the state of gantry's jobs, from one batched Slurm query
(launcher/job_state.py: the rows the Python API's ``Job.status()`` returns too)."""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any

from launcher.job_cli import add_job_filters, add_jobs_dir_arg


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "status", help="show the state of submitted jobs",
        description="Without JOB: every job under the jobs directory. JOB is a Slurm job id, "
                    "a job directory or a job name (latest); several may be given. A job "
                    "Slurm no longer knows whose last record had not ended shows as GONE "
                    "(stale), not as its last state.")
    parser.add_argument("job_refs", nargs="*", metavar="JOB", help="job id, directory or name")
    add_jobs_dir_arg(parser)
    add_job_filters(parser)
    parser.add_argument("--json", action="store_true",
                        help="print JSON (one object for one JOB, else a list)")
    parser.set_defaults(func=run, exit_at_once=True)


def _when(epoch: Any) -> str:
    if not epoch:
        return "-"
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(float(epoch)))


def _checkpoints(row: dict[str, Any]) -> str:
    if not row.get("checkpoint_dir"):
        return "off"
    if row.get("latest_checkpoint_step") is None:
        return f"{row['checkpoint_dir']} (none complete yet)"
    return f"{row['checkpoint_dir']} (latest: step {row['latest_checkpoint_step']})"


def one_job_lines(row: dict[str, Any]) -> list[str]:
    """`gantry status JOB`: one line per fact of the job."""
    from launcher.job_state import shown_state

    shown = {**row, "state": shown_state(row)}
    lines = [f"{key:<10} {shown.get(key) if shown.get(key) is not None else '-'}"
             for key in ("job_id", "name", "state", "reason", "nodes", "restarts", "exit_code",
                         "signal", "job_dir", "source")]
    lines.append(f"{'started':<10} {_when(row.get('start_time'))}")
    if row.get("terminal"):
        lines.append(f"{'ended':<10} {_when(row.get('end_time'))}")
    lines.append(f"{'attempts':<10} {', '.join(row['attempts']) or '-'}")
    if row.get("fabric"):
        lines.append(f"{'fabric':<10} {row['fabric']}")
    lines += [f"{'recovery':<10} {line}" for line in row["recoveries"]]
    lines += [f"{'straggler':<10} {record['line']}" for record in row.get("stragglers", [])]
    lines.append(f"{'checkpoints':<10} {_checkpoints(row)}")
    lines += [f"{'goodput':<10} {line}" for line in row.get("goodput", {}).get("lines", [])]
    lines += [f"{'log ' + stream:<10} {path}" for stream, path in row["logs"].items()]
    return lines


def jobs_table(rows: list[dict[str, Any]]) -> str:
    """`gantry status`: one line per job."""
    from launcher.console import text_table
    from launcher.job_state import shown_state

    header = ("JOB", "NAME", "STATE", "NODES/REASON", "RESTARTS", "RECOVERED", "EXIT", "CKPT",
              "DIR")
    return text_table(header, [
        (str(row.get("job_id")), str(row.get("name")), shown_state(row),
         str(row.get("nodes") or row.get("reason") or ""), str(row.get("restarts", 0)),
         str(len(row["recoveries"])),
         "-" if row.get("exit_code") is None else str(row["exit_code"]),
         "-" if row.get("latest_checkpoint_step") is None
         else f"step {row['latest_checkpoint_step']}", row["job_dir"])
        for row in rows])


def run(args: argparse.Namespace) -> int:
    from launcher.job_dir import jobs_root
    from launcher.job_state import job_rows, one_job_row, selected_job_dirs, state_matches

    root = jobs_root(args.jobs_dir)
    dirs = selected_job_dirs(root, args.job_refs, args.name)
    one = len(args.job_refs) == 1 and not args.state
    if one and len(dirs) == 1:
        rows = [one_job_row(dirs[0])]
    else:
        rows = [row for row in job_rows(dirs) if state_matches(row, args.state)]
    if one and not rows:  # found, but without a job id
        from launcher.errors import GantryError

        raise GantryError(f"job {args.job_refs[0]}: never submitted (its directory has no "
                          "job id)")
    if args.json:
        from launcher.console import print_json

        print_json(rows[0] if one else rows)
    elif one:
        sys.stdout.write("".join(f"{line}\n" for line in one_job_lines(rows[0])))
    elif rows:
        sys.stdout.write(jobs_table(rows))
    else:
        sys.stdout.write(f"no jobs under {root}{' match' if args.state or args.name else ''}\n")
    return 0
