"""Every native build runs CMake the one way (launcher/cmake.py): $GANTRY_CMAKE else cmake on
PATH, and a failing step is one line naming the step and CMake's own message."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from launcher.build import build_site
from launcher.cmake import first_error, run_cmake
from launcher.errors import GantryError
from launcher.plugins.build import build_spank
from launcher.site_config import load_site

REPO = Path(__file__).resolve().parents[2]


def test_both_builds_honour_gantry_cmake(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GANTRY_CMAKE", "no-such-cmake")
    monkeypatch.setenv("GANTRY_BUILD_CACHE", str(tmp_path / "cache"))
    expected = "no-such-cmake: not found (install it or point GANTRY_CMAKE at it)"
    with pytest.raises(GantryError) as site_err:
        build_site(load_site(REPO / "site_configs" / "local.yaml"))
    with pytest.raises(GantryError) as spank_err:
        build_spank(tmp_path / "spank")
    assert str(site_err.value) == str(spank_err.value) == expected
    assert not (tmp_path / "spank").exists()


@pytest.mark.skipif(shutil.which("cmake") is None, reason="needs cmake")
def test_a_failing_step_is_one_line_with_cmakes_message(tmp_path: Path) -> None:
    cmake = shutil.which("cmake")
    assert cmake is not None
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "CMakeLists.txt").write_text(
        'cmake_minimum_required(VERSION 3.16)\nproject(x NONE)\n'
        'message(FATAL_ERROR "the site asked for rocm")\n')
    with pytest.raises(GantryError) as err:
        run_cmake([cmake, "-S", str(tmp_path / "src"), "-B", str(tmp_path / "b")],
                  "cmake configure", timeout_s=120)
    assert str(err.value) == "cmake configure failed: the site asked for rocm"


def test_first_error() -> None:
    assert first_error("-- ok\nCMake Error at x:3 (message):\n  bad arch\n") == "bad arch"
    assert first_error("a\nld: cannot find -lfoo: error\nb\n") == "ld: cannot find -lfoo: error"
    assert first_error("one\nlast\n") == "last"
    assert first_error("") == "no output"
