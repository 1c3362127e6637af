"""`gantry schedules --trace`: the op costs come from a real `gantry train` trace (mean time per
op and stage over the steps after the first, computed here from the trace's own events), a
full backward split evenly into B and W, and --costs still overrides a letter."""

from __future__ import annotations

import json
import statistics
from pathlib import Path
from typing import Any

import pytest

from launcher.cli import main
from tests.integration.pipeline_helpers import train_job

pytestmark = pytest.mark.slow


def _mean_ms(trace: Path, name: str) -> float:
    events = [e for e in json.loads(trace.read_text())["traceEvents"] if e.get("ph") == "X"]
    first = min(e["args"]["step"] for e in events)  # the warm-up step is left out
    durations = [e["dur"] / 1e3 for e in events if e.get("cat") == "compute"
                 and e["name"].split(" ")[0] == name and e["args"]["step"] != first]
    assert durations, name
    return statistics.fmean(durations)


def _schedules(capsys: pytest.CaptureFixture[str], *args: str) -> dict[str, Any]:
    assert main(["schedules", "--json", "--pp", "2", "-m", "4", *args]) == 0
    return dict(json.loads(capsys.readouterr().out))


@pytest.mark.parametrize("schedule", ["zb-h1", "1f1b"])
def test_costs_from_a_training_trace(capsys: pytest.CaptureFixture[str], tmp_path: Path,
                                     native_lib_path: Path, schedule: str) -> None:
    train_job(tmp_path, native_lib_path, "run", pp=2, dp=1, schedule=schedule, m=4,
              train={"steps": 3})
    trace = tmp_path / "run" / "trace.json"
    out = _schedules(capsys, "--trace", str(trace))
    forward = _mean_ms(trace, "forward")
    assert out["costs"]["F"] == pytest.approx(forward, rel=1e-9)
    if schedule == "zb-h1":
        assert out["costs"]["B"] == pytest.approx(_mean_ms(trace, "backward_input"), rel=1e-9)
        assert out["costs"]["W"] == pytest.approx(_mean_ms(trace, "weight"), rel=1e-9)
    else:
        half = _mean_ms(trace, "backward") / 2
        assert out["costs"]["B"] == pytest.approx(half, rel=1e-9)
        assert out["costs"]["W"] == pytest.approx(half, rel=1e-9)
    zb = next(r for r in out["schedules"] if r["schedule"] == "zb-h1")
    assert zb["makespan"] > 4 * (out["costs"]["F"] + out["costs"]["B"] + out["costs"]["W"])
    overridden = _schedules(capsys, "--trace", str(trace), "--costs", "W=123")
    assert overridden["costs"]["W"] == 123 and overridden["costs"]["F"] == out["costs"]["F"]


def test_a_trace_that_is_not_one_is_a_one_line_error(capsys: pytest.CaptureFixture[str],
                                                     tmp_path: Path) -> None:
    bad = tmp_path / "trace.json"
    bad.write_text("{not json")
    assert main(["schedules", "--trace", str(bad)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"error: {bad}: not a JSON trace"), err
