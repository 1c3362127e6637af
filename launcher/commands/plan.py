"""`gantry plan [job.yaml]`: choose the nodes for a pipeline-parallel job and show why.

Shows the chosen nodes as a switch tree with stage labels (rich on a terminal, plain text when
piped), the leaf switches / blocks spanned against the lower bound, the reasons, and the Slurm
options that obtain the allocation; ``--json`` prints the same for scripts. The job comes from
the job YAML (its site, nodes, spares, pp, dp, ranks per node), flags override it (without a
job, --nodes is required). Free and unhealthy nodes come from the site's live cluster when it
answers (idle/mixed usable nodes; nodes gantry drained are unhealthy); ``--free`` or
``--offline`` plan without asking it (``--free`` default: every node).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from launcher.cli import TerminalRawDescriptionFormatter
from launcher.errors import UserInputError

if TYPE_CHECKING:  # the planner (numpy) and rich load when a plan is made
    from rich.tree import Tree

    from launcher.job_placement import LiveState
    from launcher.site_config import LoadedSite
    from topology.model import Topology
    from topology.placement import ClusterState, Placement, SlurmVersion

ASSUMED_SLURM = "24.11"
"""Slurm version assumed when neither --slurm-version, the live cluster nor `sinfo -V` says."""


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "plan",
        help="choose nodes for a job: fewest switches/blocks, rank order, Slurm options",
        description=__doc__,
        formatter_class=TerminalRawDescriptionFormatter,
    )
    parser.add_argument("job", type=Path, nargs="?", default=None,
                        help="job spec YAML (else describe the job with --nodes ...)")
    parser.add_argument("--site", type=Path, default=None,
                        help="site config (default: the job's site, else local)")
    parser.add_argument("--nodes", type=int, default=None, help="nodes that run ranks (N)")
    parser.add_argument("--spares", type=int, default=None, help="spare nodes to hold (S)")
    parser.add_argument("--pp", type=int, default=None, help="pipeline stages per replica")
    parser.add_argument(
        "--dp", type=int, default=None, help="data-parallel replicas (default: ranks / pp)"
    )
    parser.add_argument("--gpus-per-node", type=int, default=None, help="default: the site's")
    parser.add_argument("--free", metavar="HOSTLIST",
                        help="nodes free now (default: the live cluster's, else all)")
    parser.add_argument("--unhealthy", metavar="HOSTLIST", help="nodes never to use")
    parser.add_argument("--offline", action="store_true",
                        help="do not ask the cluster (every node free unless --free)")
    parser.add_argument(
        "--slurm-version", metavar="X.Y", help="the site's Slurm (default: the cluster's)"
    )
    parser.add_argument("--json", action="store_true", help="print the plan as JSON")
    parser.set_defaults(func=run)


def detect_slurm_version() -> tuple[SlurmVersion, str]:
    """The local Slurm's version, or the assumed one; with a note saying which."""
    from launcher.slurm.runner import run_slurm
    from launcher.slurm.tools import tool_path
    from topology.placement import SlurmVersion

    sinfo = tool_path("sinfo")
    if sinfo:
        result = run_slurm([sinfo, "-V"], 10.0)
        if result.ok:
            try:
                return SlurmVersion.parse(result.stdout, "sinfo -V"), "from `sinfo -V`"
            except UserInputError:
                pass
    return SlurmVersion.parse(ASSUMED_SLURM), "assumed (no sinfo here; pass --slurm-version)"


def _shape(args: argparse.Namespace) -> tuple[LoadedSite, dict[str, Any], str]:
    """(site, PlacementRequest mapping, where it came from): the job's, flags winning."""
    from launcher.job_request import check_ranks_per_node, resolve_request
    from launcher.site_config import load_site

    flags = {"nodes": args.nodes, "spares": args.spares, "pp": args.pp,
             "gpus_per_node": args.gpus_per_node}
    given = {k: v for k, v in flags.items() if v is not None}
    if args.job is None:
        if args.nodes is None:
            raise UserInputError("command line: --nodes is required without a job file")
        site = load_site(args.site)
        data: dict[str, Any] = {"spares": 0, "pp": 1,
                                "gpus_per_node": site.config.nodes.gpus_per_node}
        source = "command line"
    else:
        request = resolve_request(args.job, args.site)
        site, spec = request.site, request.spec
        data = {"nodes": spec.resources.nodes, "spares": spec.resources.spares,
                "pp": spec.parallelism.pp, "dp": spec.parallelism.dp,
                "gpus_per_node": request.ranks_per_node}
        flagged = [*given, *(["dp"] if args.dp is not None else [])]
        names = ", ".join("--" + k.replace("_", "-") for k in flagged)
        source = str(request.spec_path) + (f" with {names}" if flagged else "")
    data.update(given)
    if args.gpus_per_node is not None:
        check_ranks_per_node(site.config, args.gpus_per_node, "command line: --gpus-per-node")
    if args.dp is not None:
        data["dp"] = args.dp
    elif args.job is None or given:  # every rank slot used: dp = nodes x ranks/node / pp
        data["dp"] = max(1, data["nodes"] * max(1, data["gpus_per_node"]) // max(1, data["pp"]))
    return site, data, source


def _state(args: argparse.Namespace, site: LoadedSite) -> tuple[ClusterState, LiveState | None,
                                                                 str]:
    """Cluster state: --free / --offline, else the live cluster (else every node free)."""
    from launcher.job_placement import probe_live_state
    from topology import hostlists
    from topology.placement import ClusterState

    unhealthy = set(hostlists.expand(args.unhealthy, "--unhealthy") if args.unhealthy else ())
    if args.free is not None or args.offline:
        free = None if args.free is None else hostlists.expand(args.free, "--free")
        return ClusterState.of(free, unhealthy), None, "from --free" if free else "offline"
    live, why = probe_live_state(site)
    if live is None:
        return ClusterState.of(None, unhealthy), None, f"every node assumed free: {why}"
    state = ClusterState.of(live.free, unhealthy | live.unhealthy)
    return state, live, f"live ({live.source})"


def run(args: argparse.Namespace) -> int:
    from launcher.console import make_console, print_json
    from launcher.site_topology import site_topology
    from launcher.typed_config import from_mapping
    from topology.placement import PlacementRequest, SlurmVersion, plan_placement

    site, data, source = _shape(args)
    topology = site_topology(site)
    request = from_mapping(PlacementRequest, data, source)
    total = len(topology.node_names)
    if request.nodes + request.spares > total:  # more than the site has: bad input, as render
        raise UserInputError(f"{source}: nodes({request.nodes}) + spares({request.spares}) = "
                             f"{request.nodes + request.spares} nodes but site "
                             f"{site.config.name} has {total}")
    state, live, state_note = _state(args, site)
    if args.slurm_version is not None:  # given, even empty: never fall back to detection
        version = SlurmVersion.parse(args.slurm_version, "--slurm-version", exact=True)
        version_note = "from --slurm-version"
    elif live is not None:
        version, version_note = live.version, "of the live cluster"
    else:
        version, version_note = detect_slurm_version()
    placement = plan_placement(topology, request, state, version)
    if args.json:
        data_out = placement.to_json()
        data_out["site"] = str(site.path)
        data_out["topology_source"] = topology.source
        data_out["slurm_version"] = str(version)
        data_out["cluster_state"] = live.to_json() if live is not None else {
            "source": state_note}
        print_json(data_out)
        return 0
    show(topology, placement, f"Slurm {version} ({version_note})")
    if live is None and not (args.free is not None or args.offline):
        sys.stderr.write(f"note: cluster state: {state_note}\n")
    else:
        make_console().print(f"cluster state: {state_note}")
    return 0


def build_tree(topology: Topology, placement: Placement) -> Tree:
    """The chosen nodes under their switches, from the domain switch down (each leaf with
    how many of its nodes were chosen), drawn as the live view draws them."""
    from rich.tree import Tree

    from launcher.live.placement_view import switch_tree

    unit = placement.unit or "nodes"
    root = Tree(f"{placement.domain}  ({len(placement.spanned)} {unit})")

    def switch_label(name: str) -> str:
        switch = topology.switch_ids[name]
        if not topology.is_leaf(switch):
            return name
        chosen = sum(1 for r in placement.roles if r.leaf == name)
        return f"{name}  ({chosen} of {len(topology.leaf_nodes[switch])} nodes)"

    switch_tree(root, topology, placement.domain, placement.roles, switch_label=switch_label)
    return root


def show(topology: Topology, placement: Placement, version_line: str) -> None:
    from launcher.console import make_console

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
