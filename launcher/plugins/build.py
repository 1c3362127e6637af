"""Builds the SPANK plugin for this site with CMake (launcher/cmake.py: $GANTRY_CMAKE, else
cmake on PATH), against the installed Slurm headers (``native/spank``; hardened flags and
the export map live in its CMakeLists.txt)."""

from __future__ import annotations

from pathlib import Path

from launcher.cmake import cmake_path, run_cmake
from launcher.errors import GantryError
from launcher.install_paths import data_dir
from launcher.plugins.layout import SPANK_MODULE

SPANK_SOURCE = data_dir("native") / "spank"
"""The plugin's CMake project (package data of the wheel, or the checkout's)."""

def build_spank(build_dir: Path, slurm_include_dir: str | None = None,
                timeout_s: float = 300) -> Path:
    """Configure and build gantry_spank.so in ``build_dir``; returns the module's path."""
    cmake = cmake_path()
    configure = [cmake, "-S", str(SPANK_SOURCE), "-B", str(build_dir),
                 "-DCMAKE_BUILD_TYPE=Release"]
    if slurm_include_dir:
        configure.append(f"-DSLURM_INCLUDE_DIR={slurm_include_dir}")
    run_cmake(configure, "configuring the SPANK plugin (cmake)", timeout_s)
    run_cmake([cmake, "--build", str(build_dir)], "building the SPANK plugin", timeout_s)
    module = build_dir / SPANK_MODULE
    if not module.is_file():
        raise GantryError(f"building the SPANK plugin produced no {module}")
    return module
