"""`gantry status [JOB...]`: the state of gantry's jobs, from one batched Slurm query."""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any

from rich.table import Table

from launcher.console import make_console, print_json
from launcher.job_cli import (
    add_job_filters,
    add_jobs_dir_arg,
    client_for_job,
    job_summary,
    selected_job_dirs,
    state_matches,
)
from launcher.job_dir import jobs_root


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
    parser.set_defaults(func=run)


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


def run(args: argparse.Namespace) -> int:
    root = jobs_root(args.jobs_dir)
    dirs = selected_job_dirs(root, args.job_refs, args.name)
    infos = client_for_job(dirs[-1] if dirs else None).job_states(
        [str(d.job_id) for d in dirs]) if dirs else {}
    rows = []
    for job_dir in dirs:
        info = infos.get(str(job_dir.job_id))
        if info is not None:
            job_dir.update_meta(last_state=info.to_json(), last_seen=time.time())
        rows.append(job_summary(job_dir, info))
    rows = [row for row in rows if state_matches(row, args.state)]
    one = len(args.job_refs) == 1 and not args.state
    if one:
        from launcher.report.goodput import status_goodput

        rows[0]["goodput"] = status_goodput(dirs[0].path, rows[0])
    if args.json:
        print_json(rows[0] if one else rows)
        return 0
    console = make_console()
    if one:
        row = rows[0]
        if row.get("stale"):
            row = {**row, "state": f"GONE (last seen {row.get('last_seen_state')})"}
        for key in ("job_id", "name", "state", "reason", "nodes", "restarts", "exit_code",
                    "signal", "job_dir", "source"):
            console.print(f"{key:<10} {row.get(key) if row.get(key) is not None else '-'}")
        console.print(f"{'started':<10} {_when(row.get('start_time'))}")
        if row.get("terminal"):
            console.print(f"{'ended':<10} {_when(row.get('end_time'))}")
        console.print(f"{'attempts':<10} {', '.join(row['attempts']) or '-'}")
        if row.get("fabric"):
            console.print(f"{'fabric':<10} {row['fabric']}", markup=False, highlight=False)
        for line in row["recoveries"]:
            console.print(f"{'recovery':<10} {line}", markup=False, highlight=False)
        for record in row["stragglers"]:
            console.print(f"{'straggler':<10} {record['line']}", markup=False, highlight=False)
        console.print(f"{'checkpoints':<10} {_checkpoints(row)}")
        for line in row["goodput"]["lines"]:
            console.print(f"{'goodput':<10} {line}", markup=False, highlight=False)
        for stream, path in row["logs"].items():
            console.print(f"{'log ' + stream:<10} {path}", markup=False, highlight=False)
        return 0
    if not rows:
        sys.stdout.write(f"no jobs under {root}{' match' if args.state or args.name else ''}\n")
        return 0
    table = Table(box=None, pad_edge=False)
    for column in ("JOB", "NAME", "STATE", "NODES/REASON", "RESTARTS", "RECOVERED", "EXIT",
                   "CKPT", "DIR"):
        table.add_column(column)
    for row in rows:
        where = row.get("nodes") or row.get("reason") or ""
        exit_code = row.get("exit_code")
        state = (f"GONE (was {row.get('last_seen_state')})" if row.get("stale")
                 else str(row.get("state")))
        table.add_row(str(row.get("job_id")), str(row.get("name")), state,
                      str(where), str(row.get("restarts", 0)), str(len(row["recoveries"])),
                      "-" if exit_code is None else str(exit_code),
                      "-" if row.get("latest_checkpoint_step") is None
                      else f"step {row['latest_checkpoint_step']}", row["job_dir"])
    console.print(table)
    return 0
