"""``gantry preflight-scripts``: write the HealthCheckProgram / Prolog / Epilog scripts."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from launcher.errors import EXIT_OK
from launcher.preflight.levels import LEVELS
from topology.user_files import require_output_dir

if TYPE_CHECKING:  # the script writer loads when scripts are written
    from launcher.plugins.scripts import ScriptKind


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "preflight-scripts",
        help="write Slurm HealthCheckProgram/Prolog/Epilog scripts running gantry preflight",
        description="Write gantry-healthcheck.sh, gantry-prolog.sh and gantry-epilog.sh into "
        "OUT_DIR; each runs `gantry preflight --drain` with this site config.",
    )
    parser.add_argument("out_dir", type=Path, help="directory to write the scripts into")
    parser.add_argument("--site", type=Path, default=None, help="site config")
    parser.add_argument(
        "--level",
        choices=LEVELS,
        default=None,
        help="prolog level (default: the site's; health check/epilog: quick)",
    )
    parser.add_argument(
        "--prolog-fails-job",
        action="store_true",
        help="prolog exits non-zero on FAIL (Slurm requeues the job and sets "
        "its own 'Prolog error' reason)",
    )
    parser.add_argument("--json", action="store_true",
                        help="print the scripts written and their slurm.conf lines as JSON")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from launcher.console import print_json
    from launcher.install_paths import import_root
    from launcher.plugins.scripts import ScriptSpec, script_name, slurm_conf_for, write_scripts
    from launcher.site_config import load_site

    require_output_dir(args.out_dir, "out_dir")
    site = load_site(args.site)
    root = import_root()
    level = args.level or site.config.preflight.level
    kinds: tuple[ScriptKind, ...] = ("healthcheck", "prolog", "epilog")
    specs = [
        ScriptSpec(
            kind,
            (sys.executable, "-m", "launcher"),
            str(site.path),
            level,
            "gantry preflight-scripts",
            pythonpath=str(root) if root is not None else None,
            fail_job=args.prolog_fails_job and kind == "prolog",
            slurm_conf=tuple(slurm_conf_for(kind, (args.out_dir / script_name(kind)).resolve())),
        )
        for kind in kinds
    ]
    paths = write_scripts(args.out_dir, specs)
    if args.json:
        print_json({"site": site.config.name, "level": level,
                    "scripts": [{"kind": spec.kind, "path": str(path),
                                 "slurm_conf": list(spec.slurm_conf)}
                                for spec, path in zip(specs, paths, strict=True)]})
        return EXIT_OK
    for path in paths:
        sys.stdout.write(f"{path}\n")
    return EXIT_OK
