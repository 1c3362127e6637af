"""`gantry plan`: choose the nodes for a pipeline-parallel job and show why.

Shows the chosen nodes as a switch tree with stage labels (rich on a terminal, plain text when
piped), the leaf switches / blocks spanned against the lower bound, the reasons, and the Slurm
options that obtain the allocation; ``--json`` prints the same for scripts. Cluster state
comes from ``--free`` / ``--unhealthy`` for now (the Slurm client will supply it).
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
from pathlib import Path
from typing import Any

from rich.tree import Tree

from launcher.console import make_console, print_json
from launcher.errors import UserInputError
from launcher.site_config import load_site
from launcher.typed_config import from_mapping
from topology import hostlists
from topology.model import Topology
from topology.placement import (
    ClusterState,
    Placement,
    PlacementRequest,
    SlurmVersion,
    plan_placement,
)
from topology.site_topology import site_topology

ASSUMED_SLURM = "24.11"
"""Slurm version assumed when neither --slurm-version nor a local `sinfo -V` says."""


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "plan",
        help="choose nodes for a job: fewest switches/blocks, rank order, Slurm options",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--site", type=Path, default=None, help="site config (default: local)")
    parser.add_argument("--nodes", type=int, required=True, help="nodes that run ranks (N)")
    parser.add_argument("--spares", type=int, default=0, help="spare nodes to hold (S)")
    parser.add_argument("--pp", type=int, default=1, help="pipeline stages per replica")
    parser.add_argument(
        "--dp", type=int, default=None, help="data-parallel replicas (default: ranks / pp)"
    )
    parser.add_argument("--gpus-per-node", type=int, default=None, help="default: the site's")
    parser.add_argument("--free", metavar="HOSTLIST", help="nodes free now (default: all)")
    parser.add_argument("--unhealthy", metavar="HOSTLIST", help="nodes never to use")
    parser.add_argument(
        "--slurm-version", metavar="X.Y", help="the site's Slurm (default: `sinfo -V`)"
    )
    parser.add_argument("--json", action="store_true", help="print the plan as JSON")
    parser.set_defaults(func=run)


def detect_slurm_version() -> tuple[SlurmVersion, str]:
    """The local Slurm's version, or the assumed one; with a note saying which."""
    sinfo = shutil.which("sinfo")
    if sinfo:
        try:
            result = subprocess.run(
                [sinfo, "-V"], capture_output=True, text=True, timeout=10, check=False
            )
            if result.returncode == 0:
                return SlurmVersion.parse(result.stdout), "from `sinfo -V`"
        except (OSError, subprocess.TimeoutExpired, UserInputError):
            pass
    return SlurmVersion.parse(ASSUMED_SLURM), "assumed (no sinfo here; pass --slurm-version)"


def run(args: argparse.Namespace) -> int:
    site = load_site(args.site)
    topology = site_topology(site)
    gpus = site.config.nodes.gpus_per_node if args.gpus_per_node is None else args.gpus_per_node
    dp = args.dp
    if dp is None:  # every rank slot used: dp = nodes x ranks/node / pp
        dp = max(1, args.nodes * max(1, gpus) // max(1, args.pp))
    request = from_mapping(
        PlacementRequest,
        {
            "nodes": args.nodes,
            "spares": args.spares,
            "pp": args.pp,
            "dp": dp,
            "gpus_per_node": gpus,
        },
        "command line",
    )
    if args.slurm_version:
        version, version_note = SlurmVersion.parse(args.slurm_version), "from --slurm-version"
    else:
        version, version_note = detect_slurm_version()
    state = ClusterState.of(
        None if args.free is None else hostlists.expand(args.free, "--free"),
        hostlists.expand(args.unhealthy, "--unhealthy") if args.unhealthy else (),
    )
    placement = plan_placement(topology, request, state, version)
    if args.json:
        data = placement.to_json()
        data["site"] = str(site.path)
        data["topology_source"] = topology.source
        data["slurm_version"] = str(version)
        print_json(data)
        return 0
    show(topology, placement, f"Slurm {version} ({version_note})")
    return 0


def _role_label(placement: Placement, index: int) -> str:
    role = placement.roles[index]
    if role.spare:
        return f"{role.node}  spare"
    if len(role.slots) == 1:
        replica, stage = role.slots[0]
        return f"{role.node}  replica {replica} · stage {stage}"
    return f"{role.node}  " + " ".join(f"r{rep}/s{st}" for rep, st in role.slots)


def build_tree(topology: Topology, placement: Placement) -> Tree:
    """The chosen nodes under their switches, from the domain switch down."""
    unit = placement.unit or "nodes"
    root = Tree(f"{placement.domain}  ({len(placement.spanned)} {unit})")
    branches: dict[str, Tree] = {placement.domain: root}
    index_of = {role.node: i for i, role in enumerate(placement.roles)}
    for leaf_name in placement.spanned:
        leaf = topology.switch_ids[leaf_name]
        chain = [topology.switch_names[s] for s in topology.ancestors(leaf)]
        if placement.domain in chain:
            chain = chain[: chain.index(placement.domain)]
        parent = root
        for name in reversed(chain):
            if name not in branches:
                switch = topology.switch_ids[name]
                label = name
                if topology.is_leaf(switch):
                    chosen = sum(1 for r in placement.roles if r.leaf == name)
                    label = f"{name}  ({chosen} of {len(topology.leaf_nodes[switch])} nodes)"
                branches[name] = parent.add(label)
            parent = branches[name]
        members = [topology.node_names[n] for n in topology.leaf_nodes[leaf]]
        for node in members:
            if node in index_of:
                parent.add(_role_label(placement, index_of[node]))
    return root


def show(topology: Topology, placement: Placement, version_line: str) -> None:
    console = make_console()
    console.print(build_tree(topology, placement))
    request = placement.request
    console.print(
        f"request: {request.nodes} nodes + {request.spares} spares, pp={request.pp}, "
        f"dp={request.dp}, gpus/node={request.gpus_per_node}; {version_line}"
    )
    if placement.unit:
        console.print(
            f"spanned: {len(placement.spanned)} {placement.unit} "
            f"(lower bound {placement.lower_bound} with the free nodes, "
            f"{placement.idle_lower_bound} on an idle cluster)"
        )
    console.print("why:")
    for line in placement.explanation:
        console.print(f"  - {line}")
    console.print("slurm options: " + " ".join(placement.slurm_options))
    err = make_console(stderr=True)
    for warning in placement.warnings:
        err.print(f"warning: {warning}")
