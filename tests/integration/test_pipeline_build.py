"""`gantry build --site`: CMake with the site's settings, generated site header, cache by key,
clear one-line error when a tool is missing."""

from __future__ import annotations

import ctypes
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow


def gantry(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "launcher", *args], capture_output=True,
                          text=True, check=False, cwd=REPO,
                          env={**os.environ, "PYTHONPATH": str(REPO), **env})


def test_build_is_cached_and_carries_the_site(tmp_path: Path) -> None:
    env = {"GANTRY_BUILD_CACHE": str(tmp_path / "cache")}
    site = str(REPO / "site_configs" / "local.yaml")
    first = gantry("build", "--site", site, "--json", env=env)
    assert first.returncode == 0, first.stderr
    assert '"cached": false' in first.stdout
    lib = next((tmp_path / "cache").glob("local-*/libgantry_native.so"))
    exe = lib.parent / "gantry-native-check"
    assert exe.is_file() and os.access(exe, os.X_OK)
    mtime = lib.stat().st_mtime_ns
    second = gantry("build", "--site", site, "--json", env=env)
    assert second.returncode == 0 and '"cached": true' in second.stdout
    assert lib.stat().st_mtime_ns == mtime
    handle = ctypes.CDLL(str(lib))
    handle.gt_build_site.restype = ctypes.c_char_p
    assert handle.gt_build_site() == b"local"
    header = (lib.parent / "include" / "gantry_site.h").read_text()
    assert "#define GANTRY_SITE_BACKEND_CPU 1" in header


def test_missing_cmake_is_one_line_error(tmp_path: Path) -> None:
    env = {"GANTRY_BUILD_CACHE": str(tmp_path / "cache"), "GANTRY_CMAKE": "no-such-cmake"}
    result = gantry("build", "--site", str(REPO / "site_configs" / "local.yaml"), env=env)
    assert result.returncode == 1
    assert result.stderr.strip() == (
        "error: no-such-cmake: not found (install it or point GANTRY_CMAKE at it)"
    )


def test_cmake_failure_is_one_line_error(tmp_path: Path) -> None:
    site = tmp_path / "site.yaml"
    text = (REPO / "site_configs" / "local.yaml").read_text()
    site.write_text(text.replace("blas: openblas",
                                 "blas: openblas\n  cmake_args: [-DGANTRY_BACKEND=rocm]"))
    env = {"GANTRY_BUILD_CACHE": str(tmp_path / "cache")}
    result = gantry("build", "--site", str(site), env=env)
    assert result.returncode == 1, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: cmake configure failed:")
    assert "rocm" in lines[0]


def test_train_without_a_site_build_says_how_to_build(tmp_path: Path) -> None:
    job = tmp_path / "j.yaml"
    job.write_text("name: j\nmodel: {n_layer: 2, n_head: 2, n_embd: 8, vocab_size: 16, "
                   "seq_len: 4}\n")
    env = {"GANTRY_BUILD_CACHE": str(tmp_path / "empty")}
    result = gantry("train", str(job), "--site", str(REPO / "site_configs" / "local.yaml"),
                    env=env)
    assert result.returncode == 1
    assert "run: gantry build --site" in result.stderr
