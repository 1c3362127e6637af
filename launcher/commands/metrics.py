"""`gantry metrics JOB`: the run's metrics (step time, tokens/s, loss, per-rank timers, health
events, goodput and ETTR) as Prometheus textfiles, one per node, for node-exporter's textfile
collector (launcher/report/textfile.py); `--json` prints the same figures."""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import Any

from launcher.errors import EXIT_OK, UserInputError
from launcher.job_cli import add_jobs_dir_arg
from topology.user_files import require_short_names


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "metrics", help="write a job's metrics as Prometheus textfiles (one per node)",
        description="Write <DIR>/gantry_<job id>_<node>.prom for every node of the job's "
                    "newest attempt (each replaced atomically; files of nodes that left the "
                    "job are removed), for node-exporter's textfile collector. DIR: "
                    "--textfile-dir, else the site's metrics.textfile_dir. With --json the "
                    "figures are printed (and files written only when a directory is given "
                    "or configured).")
    parser.add_argument("job_ref", metavar="JOB", help="job id, job directory or name")
    add_jobs_dir_arg(parser)
    parser.add_argument("--textfile-dir", type=Path, default=None, metavar="DIR",
                        help="the textfile collector's directory (default: the site's "
                             "metrics.textfile_dir)")
    parser.add_argument("--node", action="append", default=None, metavar="NODE",
                        help="write only this node's file (repeatable; the per-node monitor "
                             "passes its own)")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    parser.set_defaults(func=run)


def _configured_dir(request_path: Path) -> Path | None:
    """The job's site's metrics.textfile_dir (absolute), None when it sets none."""
    import json

    from launcher.site_config import load_site

    try:
        request = json.loads(request_path.read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError):
        return None
    site_path = request.get("site_path") if isinstance(request, dict) else None
    if not isinstance(site_path, str):
        return None
    site = load_site(Path(site_path))
    configured = site.config.metrics.textfile_dir
    if configured is None:
        return None
    return site.resolve(os.path.expandvars(os.path.expanduser(configured)))


def run(args: argparse.Namespace) -> int:
    from launcher.job_dir import find_job_dir, jobs_root
    from launcher.report.textfile import read_job_metrics, write_textfiles

    require_short_names(Path(args.job_ref), "JOB")
    job_dir = find_job_dir(jobs_root(args.jobs_dir), args.job_ref)
    out = args.textfile_dir if args.textfile_dir is not None else _configured_dir(
        job_dir.request)
    if out is None and not args.json:
        raise UserInputError("--textfile-dir: not given, and the job's site sets no "
                             "metrics.textfile_dir (or pass --json)")
    if out is not None and not out.is_dir():
        source = "--textfile-dir" if args.textfile_dir is not None else "metrics.textfile_dir"
        raise UserInputError(f"{source}: {out} is not a directory (expected node-exporter's "
                             "existing textfile collector directory)")
    for node in args.node or []:
        if not node or "/" in node or node.startswith("."):
            raise UserInputError(f"--node: {node!r} is not allowed (expected a node name)")
    written = write_textfiles(job_dir.path, out, args.node) if out is not None else []
    if args.json:
        from launcher.console import print_json

        print_json({**read_job_metrics(job_dir.path).to_json(),
                    "files": [str(p) for p in written]})
        return EXIT_OK
    from launcher.console import make_console

    console = make_console()
    for path in written:
        console.print(str(path), markup=False, highlight=False)
    if not written:
        console.print("no nodes yet (the job has not launched)", markup=False)
    return EXIT_OK
