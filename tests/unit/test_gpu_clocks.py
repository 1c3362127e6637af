"""bench/gpu_clocks.py: the SM clock / power summary of the busy samples, the background sampler
and the command wrapper that adds it to a benchmark's JSON lines. nvidia-smi is a stand-in
script here (through GANTRY_NVIDIA_SMI, the override real sites use), since CI has no GPU; its
rows have the format of the H200 recordings in bench/results/clocks-*.csv."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "bench"))

import gpu_clocks  # noqa: E402

from tests.fake_nvidia_smi import BUSY_ROWS, write_fake_nvidia_smi  # noqa: E402

ROWS = [
    *BUSY_ROWS,  # GPU 0 busy: 1,700 MHz power-capped, 1,800 MHz free
    "0, 10, 1980, 100.0, 0x0000000000000000",  # idle: left out
    "0, 100, 1600, 690.0, 0x0000000000000080",  # HW power brake
    "1, 50, 1980, 300.0, 0x0000000000000004",  # never busy: no entry
    "1, [N/A], 1980, 300.0, 0x0",  # does not parse
    "garbage",
]


def test_summary_of_the_busy_samples() -> None:
    assert gpu_clocks.summarize(ROWS) == [
        {"index": 0, "busy_samples": 3, "sm_mhz_mean": 1700, "power_w_mean": 647,
         "power_capped_share": 0.67, "thermal_share": 0.0}]


def test_thermal_slowdown_is_its_own_share() -> None:
    rows = ["2, 100, 1500, 500, 0x40", "2, 100, 1500, 500, 0x20", "2, 100, 1900, 500, 0x0"]
    (summary,) = gpu_clocks.summarize(rows)
    assert summary["index"] == 2
    assert summary["thermal_share"] == 0.67 and summary["power_capped_share"] == 0.0


@pytest.fixture
def fake_smi(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The nvidia-smi stand-in (tests/fake_nvidia_smi.py) as GANTRY_NVIDIA_SMI; its folder."""
    monkeypatch.setenv("GANTRY_NVIDIA_SMI", str(write_fake_nvidia_smi(tmp_path)))
    return tmp_path


def test_sampler_polls_nvidia_smi_in_the_background(fake_smi: Path) -> None:
    with gpu_clocks.ClockSampler(interval_ms=100) as sampler:
        for _ in range(600):  # until the stand-in runs, then a little longer
            if (fake_smi / "argv.json").exists():
                break
            time.sleep(0.05)
        time.sleep(0.3)
    argv = json.loads((fake_smi / "argv.json").read_text())
    assert argv == [f"--query-gpu={gpu_clocks.QUERY}", "--format=csv,noheader,nounits",
                    "-lms", "100"]
    (summary,) = sampler.summary
    assert summary["index"] == 0 and summary["busy_samples"] >= 2
    assert 1700 <= summary["sm_mhz_mean"] <= 1800 and summary["power_capped_share"] > 0


def _wrap(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(REPO / "bench" / "gpu_clocks.py"), *args],
                          capture_output=True, text=True, env={**os.environ, **env},
                          timeout=60)


# the benchmark stand-in: once the fake nvidia-smi runs (it writes argv.json first), a little
# longer, then one JSON line and one plain line, exit status 3
CHILD = ("import json, os, pathlib, sys, time\n"
         "started = os.environ.get('SMI_STARTED')\n"
         "for _ in range(600):\n"
         "    if not started or pathlib.Path(started).exists(): break\n"
         "    time.sleep(0.05)\n"
         "time.sleep(0.3)\n"
         "print(json.dumps({'tokens_per_s': 1})); print('not json'); sys.exit(3)\n")


def test_wrapper_adds_the_clocks_to_json_lines_and_keeps_the_exit_status(
        fake_smi: Path) -> None:
    done = _wrap(["--", sys.executable, "-c", CHILD],
                 {"SMI_STARTED": str(fake_smi / "argv.json")})
    assert done.returncode == 3, done.stderr
    first, second = done.stdout.splitlines()
    record = json.loads(first)
    assert record["tokens_per_s"] == 1 and record["gpu_clocks"][0]["index"] == 0
    assert second == "not json"


def test_wrapper_without_nvidia_smi_passes_lines_through(tmp_path: Path) -> None:
    done = _wrap(["--", sys.executable, "-c", CHILD],
                 {"GANTRY_NVIDIA_SMI": str(tmp_path / "absent")})
    assert done.returncode == 3, done.stderr
    assert done.stdout.splitlines() == ['{"tokens_per_s": 1}', "not json"]


@pytest.mark.parametrize("args", [[], ["torchrun"], ["--"]])
def test_wrapper_usage_is_a_one_line_error(args: list[str]) -> None:
    done = _wrap(args, {})
    assert done.returncode == 2
    assert done.stderr.startswith("error: usage: gpu_clocks.py -- COMMAND")
    assert "Traceback" not in done.stderr


def test_wrapper_names_a_command_it_cannot_run(tmp_path: Path) -> None:
    done = _wrap(["--", str(tmp_path / "no-such-tool")], {})
    assert done.returncode == 2
    assert done.stderr.startswith("error: cannot run")
    assert "Traceback" not in done.stderr
