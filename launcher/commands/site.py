"""`gantry site ...`: site-level setup. `install-plugins` builds and installs gantry's Slurm
plugin suite (SPANK plugin, plugstack.conf, Prolog/Epilog/HealthCheckProgram scripts, the
site env files) and prints the slurm.conf lines for an admin to review. `check` compares the
site config with the live Slurm (partition, nodes, GPUs, topology, plugins, build)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the checks, the topology model (numpy) and the installer load when used
    from launcher.preflight.result import CheckResult
    from topology.model import Topology

TOPOLOGY_DESCRIPTION = """Write the topology the site's Slurm runs, as `scontrol show topology`
reports it (switch tree or blocks, every node it names), as a topology.conf or topology.yaml
for the site config's `topology.file`: the way to start a site's topology, or to bring it back
in line when `gantry site check` finds Slurm's switches or blocks grouped otherwise. An
existing --out file is kept unless --force. A block topology's BlockSizes= line is what
`scontrol show topology` shows: the base and aggregated block sizes (Slurm 24.11 prints them;
on 23.11 the base size is that of the first block). Exit status 1 when Slurm cannot be asked
or runs no topology, 2 for bad input."""

CHECK_DESCRIPTION = """Compare the site config with the live Slurm it describes, read once through
scontrol: the partition (exists, UP, holds nodes.names), every node defined, GPUs per node
(Gres=) against nodes.gpus_per_node, CPUs and memory, node states (gantry's own drains told
apart), the topology plugin, Slurm's switches or blocks against the site's (the node groups
under each), the plugin suite (files installed, slurm.conf lines in effect) and the trainer
build. Exit status 0 when nothing fails (warnings allowed), 1 when a check fails, 2 for a bad
site config."""


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "site", help="site setup: install the Slurm plugins, check a site against its live "
        "Slurm, write the topology Slurm runs")
    actions = parser.add_subparsers(dest="site_command", metavar="ACTION", required=True,
                                    parser_class=type(parser))
    install = actions.add_parser(
        "install-plugins",
        help="build the SPANK plugin, write plugstack.conf, Prolog/Epilog/HealthCheck "
        "scripts and env files; print the slurm.conf lines",
        description=__doc__,
    )
    install.add_argument("--site", type=Path, default=None,
                         help="site config (default: site_configs/local.yaml)")
    install.add_argument("--prefix", type=Path, default=None,
                         help="install directory (default: plugins.prefix, or <run dir>/plugins "
                         "for an embedded site)")
    install.add_argument("--slurm-include-dir", default=None,
                         help="directory holding slurm/spank.h (default: searched by CMake)")
    install.add_argument("--dry-run", action="store_true",
                         help="show what would be built and written; change nothing")
    install.add_argument("--json", action="store_true",
                         help="print the files written (or that would be) and the slurm.conf "
                         "lines as JSON")
    install.set_defaults(func=run_install)
    check = actions.add_parser(
        "check", help="compare the site config with the live Slurm: partition, nodes, GPUs, "
        "topology, plugins, build", description=CHECK_DESCRIPTION)
    check.add_argument("--site", type=Path, default=None,
                       help="site config (default: site_configs/local.yaml)")
    check.add_argument("--json", action="store_true", help="print the checks as JSON")
    check.set_defaults(func=run_check)
    topo = actions.add_parser(
        "topology", help="write the topology the site's Slurm runs (scontrol show topology) "
        "as topology.conf or topology.yaml", description=TOPOLOGY_DESCRIPTION)
    topo.add_argument("--site", type=Path, default=None,
                      help="site config whose Slurm to ask (default: site_configs/local.yaml)")
    topo.add_argument("--out", type=Path, default=None,
                      help="file to write (default: print it); .yaml/.yml writes topology.yaml")
    topo.add_argument("--format", choices=("conf", "yaml"), default=None,
                      help="topology.conf or topology.yaml (default: from --out's extension)")
    topo.add_argument("--force", action="store_true", help="replace an existing --out file")
    topo.set_defaults(func=run_topology)


def run_topology(args: argparse.Namespace) -> int:
    """Write (or print) Slurm's topology; notes go to stderr, the file's text to stdout."""
    from launcher.console import make_console
    from launcher.site_check.slurm_topology import (
        check_out_path,
        read_slurm_topology,
        render_topology,
        topology_format,
        write_new_file,
    )
    from launcher.site_config import load_site
    from topology import hostlists

    site = load_site(args.site)
    fmt = topology_format(args.out, args.format)
    if args.out is not None:
        check_out_path(args.out, args.force)
    topology = read_slurm_topology(site)
    text = render_topology(topology, fmt)
    if args.out is None:
        sys.stdout.write(text)
    else:
        write_new_file(args.out, text, args.force)
        _print_written(args.out, topology, site.path)
    notes = make_console(stderr=True)
    for warning in topology.warnings:
        notes.print(f"note: {warning}", markup=False)
    missing = sorted(set(site.config.nodes.node_list()) - set(topology.node_names))
    if missing:
        notes.print(f"note: {hostlists.collect(missing)} of nodes.names are in no switch or "
                    "block of Slurm's topology", markup=False)
    return 0


def _print_written(out: Path, topology: Topology, site_path: Path) -> None:
    """What was written, and the site config line that uses it."""
    from launcher.console import make_console

    units = "switches" if topology.kind == "tree" else "blocks"
    console = make_console()
    console.print(f"wrote {out}: {topology.kind} topology, {topology.declared_switches} "
                  f"{units}, {topology.node_count} nodes (from scontrol show topology)",
                  markup=False)
    console.print(f"use it in {site_path}: topology: {{plugin: {topology.kind}, file: "
                  f"{out.resolve()}}}", markup=False)


def print_checks(site_name: str, checks: list[CheckResult]) -> None:
    """A table on a terminal; one line per check when piped."""
    from rich.table import Table
    from rich.text import Text

    from launcher.console import make_console
    from launcher.preflight.result import worst

    console = make_console()
    title = f"site {site_name}: {worst(c.status for c in checks)}"
    if console.is_terminal:
        table = Table(title=title)
        for column in ("check", "status", "observed", "expected", "action"):
            table.add_column(column)
        for c in checks:
            action = c.action if c.status in ("WARN", "FAIL") else ""
            table.add_row(*(Text(cell) for cell in (c.id, c.status, c.observed, c.expected,
                                                     action)))
        console.print(table)
        return
    console.print(title, markup=False)
    for c in checks:
        line = f"  {c.status} {c.id}: {c.observed}"
        if c.expected and c.status != "PASS":
            line += f" (expected {c.expected})"
        if c.action and c.status in ("WARN", "FAIL"):
            line += f" -> {c.action}"
        console.print(line, markup=False)


def run_check(args: argparse.Namespace) -> int:
    from launcher.console import print_json
    from launcher.preflight.result import worst
    from launcher.site_check.run import check_site
    from launcher.site_config import load_site

    site = load_site(args.site)
    checks = check_site(site)
    verdict = worst(c.status for c in checks)
    if args.json:
        print_json({"site": site.config.name, "site_file": str(site.path), "status": verdict,
                    "checks": [c.to_json() for c in checks]})
    else:
        print_checks(site.config.name, checks)
    return 1 if verdict == "FAIL" else 0


def run_install(args: argparse.Namespace) -> int:
    from launcher.console import make_console, print_json
    from launcher.plugins.install import perform_install, plan_install
    from launcher.site_config import load_site

    site = load_site(args.site)
    plan = plan_install(site, args.prefix)
    if args.json:
        written = ([planned.path for planned in plan.files] if args.dry_run
                   else perform_install(plan, args.slurm_include_dir))
        print_json({"site": site.config.name, "dry_run": args.dry_run,
                    "spank_module": str(plan.layout.spank_module) if plan.choice.spank
                    else None, "files": [str(path) for path in written],
                    "slurm_conf_lines": list(plan.slurm_conf_lines)})
        return 0
    console = make_console()
    verb = "would write" if args.dry_run else "wrote"
    if args.dry_run:
        if plan.choice.spank:
            console.print(f"would build {plan.layout.spank_module} "
                          f"(CMake build in {plan.layout.spank_build_dir})")
        for planned in plan.files:
            console.print(f"{verb} {planned.path}")
    else:
        for path in perform_install(plan, args.slurm_include_dir):
            console.print(f"{verb} {path}")
    console.print(f"slurm.conf lines for site {site.config.name!r} (review, then add them; "
                  "gantry never edits a site's slurm.conf):")
    for line in plan.slurm_conf_lines:
        console.print(f"  {line}", markup=False)
    return 0
