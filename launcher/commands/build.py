"""`gantry build --site S`: compile the native trainer for a site (cached)."""

from __future__ import annotations

import argparse
from pathlib import Path


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser("build", help="compile the native trainer for a site")
    parser.add_argument("--site", type=Path, help="site config (default: site_configs/local.yaml)")
    parser.add_argument("--force", action="store_true", help="rebuild even if cached")
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from launcher.build import build_site
    from launcher.console import print_json
    from launcher.site_config import load_site

    site = load_site(args.site)
    result = build_site(site, force=args.force)
    if args.json:
        print_json({"library": str(result.library), "executable": str(result.executable),
                    "directory": str(result.directory), "cached": result.cached})
    else:
        state = "up to date" if result.cached else "built"
        print(f"{state}: {result.library}")
    return 0
