"""``gantry fabric``: one rank of the gate's fabric test (inside an allocation).

``gantry preflight fabric`` is an alias (the generated script calls it so), as for the gate.

The batch script starts it with one task on each node that passed the node checks (srun or
mpirun, as the site launches ranks); rank 0 prints the record that ``gantry gate --fabric``
judges. See launcher/preflight/fabric_rank.py and docs/preflight.md.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the site config (PyYAML) loads when the rank runs
    from launcher.site_config import FabricSection, SiteConfig


def register(subparsers: Any) -> None:
    _add(subparsers, "one rank of the gate's fabric test (all-reduce + timed rings)")


def register_alias(preflight_actions: Any) -> None:
    """``gantry preflight fabric``: an alias of ``gantry fabric``."""
    _add(preflight_actions, "alias of `gantry fabric`")


def _add(subparsers: Any, help_text: str) -> None:
    parser = subparsers.add_parser(
        "fabric", help=help_text,
        description="Run with one task per node (srun/mpirun): an all-reduce and two rings of "
        "timed point-to-point transfers over MPI (mpi) or NCCL (nccl) with the site's "
        "preflight.fabric settings; rank 0 prints one JSON record (gantry.preflight.fabric).")
    parser.add_argument("--site", type=Path, default=None, help="site config")
    parser.set_defaults(func=run)


def backend_of(site: SiteConfig) -> str:
    """mpi or nccl: preflight.fabric.backend, auto meaning nccl on a site with GPUs."""
    cfg: FabricSection = site.preflight.fabric
    if cfg.backend != "auto":
        return cfg.backend
    return "nccl" if site.nodes.gpus_per_node > 0 else "mpi"


def run(args: argparse.Namespace) -> int:
    from launcher.preflight.fabric_fault import slow_fabric_delay
    from launcher.preflight.fabric_rank import run as run_rank
    from launcher.site_config import load_site

    site = load_site(args.site).config
    slow_fabric_delay(os.environ.get("SLURMD_NODENAME", ""))  # a malformed hook fails first
    cfg = site.preflight.fabric
    return run_rank(backend_of(site), cfg.bytes, cfg.repeats, cfg.timeout_s)
