"""``gantry monitor``: this node's health while the job trains (one per node that runs ranks).

The batch script starts it beside the training step (``srun --overlap --ntasks-per-node=1``)
and stops it when the step ends; see launcher/monitor/run.py and docs/monitor.md. Exit 0
(whatever it saw), 2 on bad input.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from types import FrameType
from typing import Any

from launcher.errors import UserInputError


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "monitor",
        help="sample this node's health while the job trains; a FAIL asks that the node "
        "leave the job",
        description=__doc__,
    )
    parser.add_argument("--site", type=Path, default=None, help="site config")
    parser.add_argument("--attempt-dir", type=Path, required=True,
                        help="the running step's attempt directory (events and evictions)")
    parser.add_argument("--interval", type=float, default=None,
                        help="seconds between samples (default: the site's "
                        "preflight.monitor_interval_s)")
    parser.add_argument("--node", default=None,
                        help="this node's name (default: $SLURMD_NODENAME, else the host name)")
    parser.add_argument("--samples", type=int, default=None,
                        help="stop after this many samples (default: until stopped)")
    parser.add_argument("--no-evict", action="store_true",
                        help="only record events, never ask for an eviction")
    parser.set_defaults(func=run)


def _textfile_dir(site: Any) -> Path | None:
    """The site's metrics.textfile_dir (``~`` and ``$VARS`` expanded, relative to the site
    file), None when unset or not a directory on this node (said once on stderr)."""
    configured = site.config.metrics.textfile_dir
    if configured is None:
        return None
    path = Path(site.resolve(os.path.expandvars(os.path.expanduser(configured))))
    if not path.is_dir():
        sys.stderr.write(f"gantry monitor: metrics.textfile_dir {path} is not a directory on "
                         "this node: no Prometheus textfile\n")
        return None
    return path


def run(args: argparse.Namespace) -> int:
    from launcher.monitor.run import MonitorOptions, run_monitor
    from launcher.monitor.sample import gpus_watched
    from launcher.preflight.runner import node_name
    from launcher.preflight.thresholds import make_thresholds
    from launcher.preflight.xid_actions import xid_table
    from launcher.site_config import load_site

    site = load_site(args.site)
    interval = (site.config.preflight.monitor_interval_s if args.interval is None
                else args.interval)
    if not 0 < interval <= 86400:
        raise UserInputError(f"--interval: {interval:g} is not allowed (expected seconds "
                             "above 0, at most 86400)")
    if args.samples is not None and args.samples < 1:
        raise UserInputError(f"--samples: {args.samples} is not allowed (expected >= 1)")
    if not args.attempt_dir.is_dir():
        raise UserInputError(f"--attempt-dir {args.attempt_dir}: not a directory")
    cfg = site.config
    opts = MonitorOptions(
        attempt_dir=args.attempt_dir, node=args.node or node_name(), interval_s=interval,
        xid_table=xid_table(cfg.preflight.xid_actions),
        thresholds=make_thresholds(cfg.preflight.thresholds),
        gpus=gpus_watched(cfg.nodes.gpus_per_node), evict=not args.no_evict,
        max_samples=args.samples, textfile_dir=_textfile_dir(site))
    import signal
    import threading

    stop = threading.Event()

    def finish(_signum: int, _frame: FrameType | None) -> None:
        stop.set()

    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, finish)
    run_monitor(opts, stop)
    return 0
