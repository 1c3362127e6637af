"""`gantry site ...`: site-level setup. `install-plugins` builds and installs gantry's Slurm
plugin suite (SPANK plugin, plugstack.conf, Prolog/Epilog/HealthCheckProgram scripts, the
site env files) and prints the slurm.conf lines for an admin to review."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from launcher.console import make_console
from launcher.plugins.install import perform_install, plan_install
from launcher.site_config import load_site


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser("site", help="site setup: install gantry's Slurm plugins")
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
    install.set_defaults(func=run_install)


def run_install(args: argparse.Namespace) -> int:
    site = load_site(args.site)
    plan = plan_install(site, args.prefix)
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
