"""Fixtures of the integration tests: ``native_lib_path``, the CPU build of native/ (built once
per test module into native/build, which CMake keeps incremental)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.native.conftest import build_native

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def native_lib_path() -> Path:
    return build_native(REPO / "native" / "build")
