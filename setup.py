"""Build step of the wheel: gantry's data goes in as package data of ``launcher``.

The checkout keeps its batch templates, example site configs and native (trainer + SPANK)
sources at the top level; the wheel carries copies in ``launcher/_data/`` (no CMake build
trees, no compiled objects), where launcher/install_paths.py finds them. An editable install
reads the checkout's own directories, so nothing is copied for it.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

ROOT = Path(__file__).resolve().parent
DATA_DIRS = ("sbatch_templates", "site_configs", "native")  # = install_paths.DATA_DIRS
BUNDLE = Path("launcher") / "_data"  # = install_paths.BUNDLE
LEFT_OUT = shutil.ignore_patterns("build", "__pycache__", "*.o", "*.so", "*.pyc")


class BuildWithData(build_py):
    """build_py, then the data directories into the build tree's launcher/_data/."""

    def run(self) -> None:
        super().run()
        if self.editable_mode:
            return
        target = Path(self.build_lib) / BUNDLE
        shutil.rmtree(target, ignore_errors=True)
        for name in DATA_DIRS:
            shutil.copytree(ROOT / name, target / name, ignore=LEFT_OUT)


setup(cmdclass={"build_py": BuildWithData})
