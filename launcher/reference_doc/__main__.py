"""``python -m launcher.reference_doc [--write]``: regenerate docs/reference/ (--write), or
name the pages that differ from the code and exit 1."""

from __future__ import annotations

import argparse
import sys

from launcher.atomic_write import FileSet
from launcher.reference_doc.pages import PAGES, stale
from launcher.site_config import REPO_ROOT


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m launcher.reference_doc",
                                     description=__doc__)
    parser.add_argument("--write", action="store_true", help="write every page")
    args = parser.parse_args(argv)
    if args.write:
        with FileSet() as files:  # every page or none
            for path, render in PAGES:
                path.parent.mkdir(parents=True, exist_ok=True)
                files.write_text(path, render())
        return 0
    old = stale()
    for path in old:
        print(f"{path.relative_to(REPO_ROOT)} is stale: run `python -m launcher.reference_doc "
              "--write`", file=sys.stderr)
    return 1 if old else 0


if __name__ == "__main__":
    raise SystemExit(main())
