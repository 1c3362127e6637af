"""A run's metrics.jsonl and trace.json as read by `gantry report` and `gantry schedules
--trace`: damaged files are one-line errors naming them; strict JSON out (a NaN loss is null)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from launcher.console import print_json
from launcher.errors import UserInputError
from launcher.report.run_data import read_metrics, read_trace


def _event(**fields: object) -> dict[str, object]:
    event: dict[str, object] = {"name": "forward s0 mb0", "cat": "compute", "ph": "X",
                                "pid": 0, "ts": 0.0, "dur": 10.0,
                                "args": {"step": 0, "stage": 0, "micro_batch": 0}}
    event.update(fields)
    return event


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        (b'{"traceEvents": [\xff]}', "not UTF-8 text (invalid start byte at byte 17)"),
        (b"[" * 100000, "nested too deeply to be a Chrome trace"),
        (json.dumps([_event(ts=math.nan)]).encode(),
         "traceEvents[0]: ts: nan is not allowed (expected a finite number)"),
        (json.dumps([_event(dur=-5)]).encode(),
         "traceEvents[0]: dur: -5.0 is not allowed (expected a finite number >= 0)"),
        (json.dumps([_event(pid=math.inf)]).encode(),
         "traceEvents[0]: pid: inf is not allowed (expected a finite number >= 0)"),
    ],
)
def test_a_damaged_trace_is_one_line_naming_it(tmp_path: Path, raw: bytes, message: str) -> None:
    path = tmp_path / "trace.json"
    path.write_bytes(raw)
    with pytest.raises(UserInputError) as info:
        read_trace(path)
    assert str(info.value) == f"{path}: {message}"


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        (b'{"step": 1, "loss": \xff}\n', "not UTF-8 text (invalid start byte at byte 20)"),
        (b"[" * 100000 + b"\n", ":1: nested too deeply to be a metrics record"),
    ],
)
def test_damaged_metrics_are_one_line_naming_them(tmp_path: Path, raw: bytes,
                                                  message: str) -> None:
    path = tmp_path / "metrics.jsonl"
    path.write_bytes(raw)
    with pytest.raises(UserInputError) as info:
        read_metrics(path)
    assert str(info.value).startswith(str(path)) and str(info.value).endswith(message)


def test_json_output_has_null_for_nan(capsys: pytest.CaptureFixture[str]) -> None:
    print_json({"first_loss": math.nan, "losses": [1.0, math.inf], "n": 2})
    assert json.loads(capsys.readouterr().out) == {"first_loss": None,
                                                   "losses": [1.0, None], "n": 2}
