"""Allows `python -m launcher ...` as an alias of the `gantry` console script."""

from launcher.cli import console

raise SystemExit(console())
