"""Where gantry's own files are: its data (batch templates, example site configs, the native
trainer and SPANK sources) and the directory, if any, a job step must import gantry from.

A wheel carries the data as package data in the package's ``_data`` directory (setup.py's
build step copies the checkout's top-level ``sbatch_templates/``, ``site_configs/`` and
``native/`` there); a checkout (editable install or PYTHONPATH) reads those directories where
they are. Both are found through importlib.resources. gantry never writes into them: native
builds go to the build cache (launcher/build.py ``cache_root``).
"""

from __future__ import annotations

import os
from importlib import resources
from pathlib import Path
from typing import Literal

from launcher.errors import GantryError

DataDir = Literal["sbatch_templates", "site_configs", "native"]
DATA_DIRS: tuple[DataDir, ...] = ("sbatch_templates", "site_configs", "native")
BUNDLE = "_data"
"""The directory of ``launcher`` that holds the data in a wheel."""


def package_dir() -> Path:
    """The directory of the ``launcher`` package (files, not a zip archive)."""
    found = resources.files("launcher")
    if not isinstance(found, Path):
        raise GantryError(f"gantry is installed as {found} (a zip archive): install it as files "
                          "(pip install), its templates and native sources must be on disk")
    return found


def data_dir(name: DataDir) -> Path:
    """``name`` as this gantry carries it: the wheel's package data, else the checkout's."""
    package = package_dir()
    bundled = package / BUNDLE / name
    return bundled if bundled.is_dir() else package.parent / name


def import_root() -> Path | None:
    """The directory to put on a job step's PYTHONPATH so that its interpreter imports this
    gantry: the one holding ``launcher/`` (a checkout, a ``pip install --target`` dir), or
    None when that is a site directory of this interpreter (an installed gantry needs none)."""
    import site
    import sysconfig

    root = package_dir().parent.resolve()
    paths = sysconfig.get_paths()
    sites = [paths["purelib"], paths["platlib"], *site.getsitepackages(),
             site.getusersitepackages()]
    return None if root in {Path(p).resolve() for p in sites} else root


def prepend_pythonpath(current: str | None) -> str | None:
    """A child's PYTHONPATH: :func:`import_root` before ``current`` (never replacing it);
    ``current`` unchanged when gantry is installed."""
    root = import_root()
    if root is None:
        return current
    return f"{root}{os.pathsep}{current}" if current else str(root)
