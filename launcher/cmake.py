"""CMake, run one way for every native build (the site's library, the SPANK plugin).

The tool is ``$GANTRY_CMAKE``, else ``cmake`` on PATH (:func:`find_tool` gives the same rule
for the compilers: CC, NVCC). Each step runs without a shell under the bounded process runner,
so a configure or build that hangs is killed with its process group; a failure is one line
naming the step and the first error CMake printed.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Sequence

from launcher.errors import GantryError
from launcher.process_runner import ToolOutput, run_tool

CMAKE_ENV = "GANTRY_CMAKE"


def find_tool(env_name: str, default: str) -> str:
    """The path of ``$env_name`` (a name on PATH or a path), else of ``default`` on PATH."""
    wanted = os.environ.get(env_name, default)
    found = shutil.which(wanted)
    if found is None:
        raise GantryError(f"{wanted}: not found (install it or point {env_name} at it)")
    return found


def cmake_path() -> str:
    """The cmake every build runs."""
    return find_tool(CMAKE_ENV, "cmake")


def first_error(output: str) -> str:
    """The line that says what went wrong: the message after CMake's first ``CMake Error``
    line, else the first line naming an error or something not found, else the last line."""
    lines = [ln.strip() for ln in output.splitlines() if ln.strip()]
    cmake_errors = [i for i, ln in enumerate(lines) if ln.startswith("CMake Error")]
    if cmake_errors and cmake_errors[0] + 1 < len(lines):  # the message follows the line
        return lines[cmake_errors[0] + 1]
    errors = [ln for ln in lines if "error" in ln.lower() or "not found" in ln.lower()]
    return (errors or lines[-1:] or ["no output"])[0]


def run_cmake(argv: Sequence[str], what: str, timeout_s: float) -> ToolOutput:
    """Run one CMake step (``argv`` starts with :func:`cmake_path`); ``what`` names it in
    the error when it cannot start, times out or fails."""
    done = run_tool(argv, timeout_s)
    if done.start_error is not None:
        raise GantryError(f"{what}: cannot run {done.argv[0]} ({done.start_error})")
    if done.timed_out:
        raise GantryError(f"{what}: no result within {timeout_s:.0f} s (killed)")
    if done.too_much:
        raise GantryError(f"{what}: {done.describe_failure()}")
    if done.returncode != 0:
        raise GantryError(f"{what} failed: {first_error(done.stderr + chr(10) + done.stdout)}")
    return done
