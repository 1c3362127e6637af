"""Builds the SPANK plugin for this site with CMake, against the installed Slurm headers
(``native/spank``; hardened flags and the export map live in its CMakeLists.txt)."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Sequence
from pathlib import Path

from launcher.errors import GantryError
from launcher.plugins.layout import SPANK_MODULE

SPANK_SOURCE = Path(__file__).resolve().parent.parent.parent / "native" / "spank"
"""The plugin's CMake project in this checkout."""

_TAIL_LINES = 15


def _run(argv: Sequence[str], what: str, timeout_s: float) -> None:
    try:
        result = subprocess.run(
            list(argv), capture_output=True, text=True, timeout=timeout_s, check=False
        )
    except subprocess.TimeoutExpired:
        raise GantryError(f"{what}: no result within {timeout_s:.0f} s") from None
    except OSError as err:
        raise GantryError(f"{what}: cannot run {argv[0]} ({err.strerror})") from None
    if result.returncode != 0:
        output = (result.stdout + result.stderr).strip().splitlines()
        tail = "\n".join(output[-_TAIL_LINES:])
        errors = [ln.strip() for ln in output if "error" in ln.lower()]
        summary = errors[0] if errors else (output[-1].strip() if output else "no output")
        raise GantryError(
            f"{what} failed (exit {result.returncode}): {summary}\n{tail}"
        )


def build_spank(build_dir: Path, slurm_include_dir: str | None = None,
                timeout_s: float = 300) -> Path:
    """Configure and build gantry_spank.so in ``build_dir``; returns the module's path."""
    cmake = shutil.which("cmake")
    if cmake is None:
        raise GantryError("cannot build the SPANK plugin: cmake is not installed")
    configure = [cmake, "-S", str(SPANK_SOURCE), "-B", str(build_dir),
                 "-DCMAKE_BUILD_TYPE=Release"]
    if slurm_include_dir:
        configure.append(f"-DSLURM_INCLUDE_DIR={slurm_include_dir}")
    _run(configure, "configuring the SPANK plugin (cmake)", timeout_s)
    _run([cmake, "--build", str(build_dir)], "building the SPANK plugin", timeout_s)
    module = build_dir / SPANK_MODULE
    if not module.is_file():
        raise GantryError(f"building the SPANK plugin produced no {module}")
    return module
