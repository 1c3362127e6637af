"""Tests for the CLI skeleton: --version, --help and the one-line error convention."""

from __future__ import annotations

import subprocess
import sys

import launcher


def run_gantry(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "launcher", *args], capture_output=True, text=True, check=False
    )


def test_version() -> None:
    result = run_gantry("--version")
    assert result.returncode == 0
    assert result.stdout.strip() == f"gantry {launcher.__version__}"


def test_unknown_flag_is_one_line_error_exit_2() -> None:
    result = run_gantry("--no-such-flag")
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1
    assert lines[0].startswith("error: ")
    assert "Traceback" not in result.stderr
