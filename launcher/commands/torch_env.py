"""``gantry torch-env``: run a rank of a per-rank command job with PyTorch's environment."""

from __future__ import annotations

import argparse
from typing import Any


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "torch-env",
        help="run the command after -- with PyTorch's distributed environment (per-rank jobs)",
        description="Inside the batch script, as each task of a per-rank command job: exec "
        "the command after -- with RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE and "
        "NODE_RANK from the launcher's environment, ranks in the order of --nodes (the "
        "gate's); MASTER_ADDR and MASTER_PORT come from the batch script. --free-port "
        "prints a TCP port free on this node instead (the batch script's MASTER_PORT).",
    )
    parser.add_argument("--nodes", default="",
                        help="the launch nodes, comma-separated, in rank order")
    parser.add_argument("--ranks-per-node", type=int, default=1,
                        help="ranks (tasks) per node (default 1)")
    parser.add_argument("--free-port", action="store_true",
                        help="print a TCP port free on this node and exit")
    parser.set_defaults(func=run, passthrough=[])


def run(args: argparse.Namespace) -> int:
    from launcher.torch_env import exec_rank, free_port

    if args.free_port:
        print(free_port())
        return 0
    nodes = [node for node in args.nodes.split(",") if node]
    exec_rank(list(args.passthrough), nodes, args.ranks_per_node)
    return 1  # not reached: exec_rank replaces the process or raises
