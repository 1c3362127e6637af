"""Fixtures of the native parity tests: the library built once per session with CMake."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from launcher.native.binding import NativeLibrary

REPO = Path(__file__).resolve().parents[2]


def build_native(build_dir: Path) -> Path:
    """Configures and builds native/ into build_dir; returns the shared library's path."""
    subprocess.run(
        ["cmake", "-S", str(REPO / "native"), "-B", str(build_dir), "-DCMAKE_BUILD_TYPE=Release"],
        check=True, capture_output=True, text=True,
    )
    subprocess.run(
        ["cmake", "--build", str(build_dir), "-j", str(os.cpu_count() or 1)],
        check=True, capture_output=True, text=True,
    )
    return build_dir / "libgantry_native.so"


@pytest.fixture(scope="session")
def native_build_dir() -> Path:
    build_dir = REPO / "native" / "build"
    build_native(build_dir)
    return build_dir


@pytest.fixture(scope="session")
def native_lib(native_build_dir: Path) -> NativeLibrary:
    return NativeLibrary(native_build_dir / "libgantry_native.so")
