"""The run's start event records the native library's GANTRY_* switches with the values the
run used, and a bad switch stops `gantry train` with one error line naming it (exit 2)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from launcher import job_dir
from launcher.native.runtime_config import SWITCHES
from tests.integration.pipeline_helpers import gantry_train, train_job, write_job

pytestmark = pytest.mark.slow


def test_start_event_lists_the_switches(tmp_path: Path, native_lib_path: Path,
                                        monkeypatch: pytest.MonkeyPatch) -> None:
    for switch in SWITCHES:
        monkeypatch.delenv(switch.name, raising=False)
    train_job(tmp_path, native_lib_path, "sw", pp=1, dp=1, schedule="1f1b", m=2, train={"steps": 1},
              env={"GANTRY_OPT_OVERLAP": "0", "GANTRY_DP_BUCKET_MB": "0.5"})
    events = [json.loads(line)
              for line in (tmp_path / "sw" / job_dir.EVENTS_FILE).read_text().splitlines()]
    start = next(e for e in events if e["event"] == "start")
    expected = {s.name: s.default for s in SWITCHES}
    expected.update({"GANTRY_OPT_OVERLAP": "0", "GANTRY_DP_BUCKET_MB": "0.5"})
    assert start["native_switches"] == expected


def test_bad_switch_is_one_error_line(tmp_path: Path, native_lib_path: Path) -> None:
    job = write_job(tmp_path, "bad", pp=1, dp=1, schedule="1f1b", m=2, train={"steps": 1})
    result = gantry_train(job, 1, native_lib_path, run_dir=tmp_path / "run",
                          env={"GANTRY_CE_FUSED": "yes"})
    assert result.returncode == 2, result.stderr[-3000:]
    assert "error: GANTRY_CE_FUSED='yes' is not allowed (allowed: 0, 1)" in result.stderr
    assert "Traceback" not in result.stderr
