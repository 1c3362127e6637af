"""A run's metrics.jsonl and trace.json as read by `gantry report` and `gantry schedules
--trace`: damaged files are one-line errors naming them; strict JSON out (a NaN loss is null)."""

from __future__ import annotations

import contextlib
import io
import json
import math
from pathlib import Path

import pytest

from launcher.cli import main
from launcher.console import print_json
from launcher.errors import UserInputError
from launcher.report.run_data import TIMING_KEYS, parse_metrics_text, read_metrics, read_trace
from launcher.report.sources import attempts_of


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


def _record(**fields: object) -> str:
    record: dict[str, object] = {"step": 1, "loss": 2.0, "tokens_per_s": 100.0, "lr": 1e-3,
                                 "grad_norm": 1.0, "ranks": [{k: 0.5 for k in TIMING_KEYS}]}
    record.update(fields)
    return json.dumps(record)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (_record(loss=1e308), "loss: 1e+308 is not allowed (expected a finite number of "
         "magnitude at most 1e+100, NaN or Infinity)"),
        (_record(tokens_per_s=1e308), "tokens_per_s: 1e+308 is not allowed (expected a "
         "finite number of magnitude at most 1e+100)"),
        (_record(loss=10**400), "loss: an integer of 401 digits is not allowed"),
        (_record().replace('"loss": 2.0', '"loss": ' + "9" * 5000),
         "not JSON gantry can read (a number of more than 4,300 digits)"),
        (_record(step=math.inf), "step: inf is not allowed (expected a finite number)"),
        (_record(step=2**31), "step: 2147483648 is not allowed (expected an integer 1 .. "),
        (_record(lr=-math.inf), "lr: -inf is not allowed (expected a finite number)"),
        (_record(ranks=[{**{k: 0.5 for k in TIMING_KEYS}, "bubble_s": math.nan}]),
         "ranks[0]: bubble_s: nan is not allowed (expected a finite number)"),
    ],
)
def test_numbers_past_what_a_run_writes_are_one_line(tmp_path: Path, text: str,
                                                     message: str) -> None:
    path = tmp_path / "metrics.jsonl"
    path.write_text(text + "\n")
    with pytest.raises(UserInputError) as info:
        read_metrics(path)
    assert str(info.value).startswith(f"{path}:1: {message}")


def test_a_diverged_loss_is_read() -> None:
    records = parse_metrics_text(_record(loss=math.nan, grad_norm=math.inf) + "\n"
                                 + _record(step=2, loss=-math.inf) + "\n", Path("m.jsonl"))
    assert math.isnan(records[0].loss) and records[0].grad_norm == math.inf
    assert records[1].loss == -math.inf


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        (json.dumps([_event(ts=1e308)]).encode(),
         "traceEvents[0]: ts: 1e+308 is not allowed (expected a finite number of magnitude"),
        (json.dumps([_event(dur=1e300)]).encode(), "traceEvents[0]: dur: 1e+300 is not allowed"),
        (json.dumps([_event(pid=1e300)]).encode(), "traceEvents[0]: pid: 1e+300 is not allowed"),
        (json.dumps([_event(args={"step": 2**40, "stage": 0, "micro_batch": 0})]).encode(),
         "traceEvents[0]: step: 1.1e+12 is not allowed (expected at most 2147483647)"),
        (b'[{"ph": "X", "ts": ' + b"9" * 5000 + b"}]",
         "not a JSON trace gantry can read (a number of more than 4,300 digits)"),
    ],
)
def test_trace_numbers_past_what_a_run_writes_are_one_line(tmp_path: Path, raw: bytes,
                                                           message: str) -> None:
    path = tmp_path / "trace.json"
    path.write_bytes(raw)
    with pytest.raises(UserInputError) as info:
        read_trace(path)
    assert str(info.value).startswith(f"{path}: {message}")


def test_report_of_a_huge_loss_is_one_line_exit_2(tmp_path: Path) -> None:
    """`gantry report` itself: a finite 1e308 loss reached matplotlib, whose tick locator
    raised ValueError 'arange: cannot compute length' (a traceback)."""
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "metrics.jsonl").write_text(_record() + "\n" + _record(step=2, loss=1e308)
                                           + "\n")
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        code = main(["report", str(run_dir), "--out", str(tmp_path / "report")])
    assert code == 2
    assert err.getvalue().splitlines() == [
        f"error: {run_dir}/metrics.jsonl:2: loss: 1e+308 is not allowed (expected a finite "
        "number of magnitude at most 1e+100, NaN or Infinity)"]
    assert not (tmp_path / "report").exists()


def test_attempt_directories_with_other_digits_sort_first(tmp_path: Path) -> None:
    """A name part of '²' (str.isdigit() true, int() refuses it) or of too many digits counts
    as -1: such a directory sorts before the numbered attempts, never a ValueError."""
    runs = tmp_path / "runs"
    for name in ("7-1", "7-0", "\u00b2-1", "7-" + "9" * 30):
        (runs / name).mkdir(parents=True)
        (runs / name / "metrics.jsonl").write_text(_record() + "\n")
    assert [p.name for p in attempts_of(tmp_path)] == ["\u00b2-1", "7-" + "9" * 30, "7-0",
                                                       "7-1"]


def test_the_plots_draw_the_extremes_the_readers_admit(tmp_path: Path) -> None:
    """Every value read_metrics/read_trace let through draws: NaN and +-Infinity losses (a
    diverged run), magnitudes of MAX_MAGNITUDE, a trace spanning +-MAX_MAGNITUDE µs."""
    from launcher.report import plots, timeline
    from launcher.report.run_data import MAX_MAGNITUDE, RankTiming, StepRecord, TraceEvent

    top = MAX_MAGNITUDE
    timing = RankTiming(top, top, top, top, top, top)
    losses = [math.nan, math.inf, -math.inf, top, -top, 5e-324, 0.0, 3.0]
    records = [StepRecord(i + 1, loss, top if i % 2 else -top, top, loss, (timing, timing))
               for i, loss in enumerate(losses)]
    plots.loss_figure(records, "extremes", tmp_path / "loss.png")
    events = [TraceEvent(0, 0, "forward s0 mb0", "compute", -top / 1e6, top / 1e6, 0, 0),
              TraceEvent(1, 0, "backward s1 mb0", "compute", 0.0, top / 1e6, 1, 0)]
    plots.timeline_figure(timeline.step_timeline(events, 0), timeline.totals_by_rank(events),
                          "extremes", tmp_path / "timeline.png")
    assert (tmp_path / "loss.png").stat().st_size > 0
    assert (tmp_path / "timeline.png").stat().st_size > 0
