"""`gantry cluster up | down | status | env`: the embedded Slurm cluster of a site.

up      start munged, slurmctld and one slurmd per node (a no-op when already up)
down    stop exactly the processes `up` started (jobs are cancelled first)
status  daemons, node states and the switch tree; --json for scripts
env     the `export SLURM_CONF=...` (and the site's MPI environment) for plain Slurm tools
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING

from launcher.errors import EXIT_BAD_INPUT, EXIT_OK, UserInputError

if TYPE_CHECKING:  # the site schema loads when a command runs
    from launcher.site_config import LoadedSite


def _add_site(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--site",
        type=Path,
        default=None,
        metavar="PATH",
        help="site config (default: site_configs/local.yaml, the embedded 8-node cluster)",
    )


def _site_flag(site: LoadedSite) -> str:
    import shlex

    from launcher.site_config import DEFAULT_SITE

    return "" if site.path == DEFAULT_SITE.resolve() else f" --site {shlex.quote(str(site.path))}"


def _up(args: argparse.Namespace) -> int:
    from launcher.console import make_console, print_json

    if args.timeout <= 0:
        raise UserInputError(f"--timeout: {args.timeout} is not allowed (expected seconds > 0)")
    from launcher.cluster import lifecycle
    from launcher.site_config import load_site

    site = load_site(args.site)
    result = lifecycle.up(site, timeout=args.timeout)
    plan = result.plan
    console = make_console()
    name = site.config.slurm.cluster_name
    if args.json:
        print_json({"cluster": name, "already_running": result.already_running,
                    "restarted_partial": list(result.restarted_partial),
                    "seconds": None if result.already_running else round(result.seconds, 3),
                    "nodes": list(plan.nodes), "slurm_version": str(plan.features.version),
                    "topology": site.config.topology.plugin,
                    "run_dir": str(plan.layout.root), "slurm_conf": str(plan.layout.slurm_conf)})
        return EXIT_OK
    if result.already_running:
        console.print(
            f"cluster {name} is already up ({len(plan.nodes)} nodes, run dir "
            f"{plan.layout.root}); nothing started",
            markup=False,
        )
        return EXIT_OK
    if result.restarted_partial:
        console.print(
            f"cluster {name} was partly up ({', '.join(result.restarted_partial)}); "
            "stopped it and started it again",
            markup=False,
        )
    console.print(
        f"cluster {name} up in {result.seconds:.1f} s: {len(plan.nodes)} nodes idle, "
        f"Slurm {plan.features.version}, topology {site.config.topology.plugin}",
        markup=False,
    )
    console.print(f"slurm.conf: {plan.layout.slurm_conf}", markup=False)
    console.print(
        f'use it with plain Slurm tools: eval "$(gantry cluster env{_site_flag(site)})"',
        markup=False,
    )
    return EXIT_OK


def _down(args: argparse.Namespace) -> int:
    from launcher.cluster import lifecycle
    from launcher.console import make_console, print_json
    from launcher.site_config import load_site

    site = load_site(args.site)
    layout, outcomes = lifecycle.down(site)
    console = make_console()
    name = site.config.slurm.cluster_name
    stopped = [d for d, outcome in outcomes.items() if outcome != "not running"]
    if args.json:
        print_json({"cluster": name, "was_running": bool(stopped), "daemons": dict(outcomes),
                    "run_dir": str(layout.root), "log_dir": str(layout.log_dir)})
        return EXIT_OK
    if not stopped:
        console.print(f"cluster {name} was not running (run dir {layout.root})", markup=False)
        return EXIT_OK
    killed = [d for d, outcome in outcomes.items() if outcome == "killed"]
    extra = f" ({len(killed)} needed SIGKILL: {', '.join(killed)})" if killed else ""
    console.print(
        f"cluster {name} down: stopped {len(stopped)} daemons{extra}; logs kept in "
        f"{layout.log_dir}",
        markup=False,
    )
    return EXIT_OK


def _status(args: argparse.Namespace) -> int:
    from launcher.cluster import status, status_view
    from launcher.console import make_console, print_json
    from launcher.site_config import load_site

    site = load_site(args.site)
    current = status.collect(site)
    if args.json:
        print_json(current.to_json())
    else:
        status_view.show(current, make_console())
    return EXIT_OK


def env_lines(site: LoadedSite) -> list[str]:
    """Shell lines that point Slurm tools at the cluster and set the site's MPI env."""
    import shlex

    from launcher.cluster.layout import RunLayout

    layout = RunLayout(site.run_dir())
    lines = [f"export SLURM_CONF={shlex.quote(str(layout.slurm_conf))}"]
    if site.config.mpi.env:
        lines.append("# MPI environment for ranks (site mpi.env)")
        for key, value in site.config.mpi.env.items():
            lines.append(f"export {key}={shlex.quote(value)}")
    return lines


def _env(args: argparse.Namespace) -> int:
    from launcher.site_config import load_site

    site = load_site(args.site)
    for line in env_lines(site):
        print(line)
    return EXIT_OK


def _no_action(args: argparse.Namespace) -> int:
    args.cluster_parser.print_help()
    return EXIT_BAD_INPUT


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "cluster",
        help="start, stop and inspect the embedded Slurm cluster",
        description="The embedded Slurm cluster: real munged, slurmctld and one slurmd per "
        "emulated node on this host, configured from the site config; all state, logs and "
        "pid files under the site's run dir.",
    )
    parser.set_defaults(func=_no_action, cluster_parser=parser)
    actions = parser.add_subparsers(dest="cluster_command", metavar="ACTION")

    up = actions.add_parser("up", help="start the cluster (a no-op when it is already up)")
    _add_site(up)
    up.add_argument(
        "--timeout",
        type=float,
        default=60.0,
        metavar="SECONDS",
        help="how long to wait for every node to be idle (default: 60)",
    )
    up.add_argument("--json", action="store_true", help="print the result as JSON")
    up.set_defaults(func=_up)

    down = actions.add_parser("down", help="stop the processes `up` started (cancels jobs)")
    _add_site(down)
    down.add_argument("--json", action="store_true",
                      help="print each daemon's outcome as JSON")
    down.set_defaults(func=_down)

    show = actions.add_parser("status", help="daemons, node states and the switch tree")
    _add_site(show)
    show.add_argument("--json", action="store_true", help="machine-readable output")
    show.set_defaults(func=_status)

    env = actions.add_parser("env", help="print `export SLURM_CONF=...` for plain Slurm tools")
    _add_site(env)
    env.set_defaults(func=_env)
