"""`gantry report` pieces on hand-written run files: parsing errors name file and line, attempts
merge, phases, idle gaps, the bubble formula, the schedules' theoretical bubble, CLI errors."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from launcher.errors import UserInputError
from launcher.report.run_data import (
    RankTiming,
    StepRecord,
    TraceEvent,
    merge_attempts,
    parse_metrics_text,
    read_trace,
)
from launcher.report.theory import theoretical_bubble
from launcher.report.timeline import (
    measured_bubble,
    phase_of,
    step_bubble,
    step_timeline,
    typical_step,
)
from launcher.schedules import Op

REPO = Path(__file__).resolve().parents[2]
TIMING = {"compute_s": 0.3, "send_s": 0.01, "recv_s": 0.01, "bubble_s": 0.1, "sync_s": 0.05,
          "total_s": 0.47}


def line(step: int, loss: float, **extra: object) -> str:
    record = {"step": step, "loss": loss, "lr": 1e-3, "grad_norm": 1.0, "tokens_per_s": 100.0,
              "ranks": [TIMING, TIMING], **extra}
    return json.dumps(record)


def event(rank: int, step: int, name: str, cat: str, start: float, end: float,
          stage: int = 0, mb: int = 0) -> TraceEvent:
    return TraceEvent(rank, step, name, cat, start, end, stage, mb)


def test_metrics_parse_and_skip_only_a_partial_last_line(tmp_path: Path) -> None:
    path = tmp_path / "metrics.jsonl"
    text = line(1, 5.0) + "\n" + line(2, 4.0) + "\n" + '{"step": 3, "lo'
    records = parse_metrics_text(text, path, "a")
    assert [(r.step, r.loss, r.attempt) for r in records] == [(1, 5.0, "a"), (2, 4.0, "a")]
    assert records[0].ranks[0].pipeline_s == pytest.approx(0.42)


@pytest.mark.parametrize("bad,message", [
    ('{"step": 2, "lo\n', "metrics.jsonl:2: not JSON"),
    ('[1, 2]\n', "metrics.jsonl:2: expected a JSON object, got list"),
    (line(2, 1.0, grad_norm="x") + "\n", "metrics.jsonl:2: grad_norm: 'x' is not allowed"),
    (line(0, 1.0) + "\n", "metrics.jsonl:2: step: 0 is not allowed"),
    (line(2, 1.0, ranks=[{"compute_s": 1}]) + "\n", "ranks[0]: send_s: None is not allowed"),
])
def test_metrics_errors_name_file_line_and_field(tmp_path: Path, bad: str, message: str) -> None:
    with pytest.raises(UserInputError, match=message.replace("[", r"\[").replace("]", r"\]")):
        parse_metrics_text(line(1, 5.0) + "\n" + bad, tmp_path / "metrics.jsonl")


def test_later_attempt_replaces_replayed_steps() -> None:
    def rec(step: int, loss: float, attempt: str) -> StepRecord:
        return StepRecord(step, loss, 1.0, 1.0, 1.0, (), attempt)

    merged = merge_attempts([[rec(1, 5, "a"), rec(2, 4, "a"), rec(3, 3.5, "a")],
                             [rec(3, 3.4, "b"), rec(4, 3.0, "b")]])
    assert [(r.step, r.loss, r.attempt) for r in merged] == [
        (1, 5, "a"), (2, 4, "a"), (3, 3.4, "b"), (4, 3.0, "b")]


@pytest.mark.parametrize("name,cat,phase", [
    ("forward s0 mb1", "compute", "forward"), ("backward s1 mb0", "compute", "backward"),
    ("backward_input s1 mb0", "compute", "backward"), ("weight s1 mb0", "compute", "weight-grad"),
    ("send_act s0 mb0", "comm", "send"), ("recv_grad s0 mb0", "comm", "recv"),
    ("wait send_grad s1 mb0", "wait", "send"), ("wait recv_act s1 mb2", "wait", "idle"),
])
def test_phase_of_every_event_kind(name: str, cat: str, phase: str) -> None:
    assert phase_of(event(0, 0, name, cat, 0.0, 1.0)) == phase


def test_step_timeline_fills_gaps_with_idle_and_adds_up() -> None:
    events = [
        event(0, 3, "forward s0 mb0", "compute", 10.0, 10.2),
        event(0, 3, "send_act s0 mb0", "comm", 10.2, 10.21),
        event(0, 3, "wait recv_grad s0 mb0", "wait", 10.21, 10.6),
        event(0, 3, "backward s0 mb0", "compute", 10.6, 11.0, 0),
        event(1, 3, "wait recv_act s1 mb0", "wait", 10.0, 10.22, 1),
        event(1, 3, "forward s1 mb0", "compute", 10.25, 10.4, 1),
        event(1, 3, "backward s1 mb0", "compute", 10.4, 10.6, 1),
        event(0, 4, "forward s0 mb0", "compute", 20.0, 20.2),
    ]
    timeline = step_timeline(events, 3)
    assert timeline.window_s == pytest.approx(1.0)
    assert timeline.ranks == (0, 1)
    assert timeline.stages == {0: (0,), 1: (1,)}
    for rank in (0, 1):
        assert sum(timeline.phase_seconds(rank).values()) == pytest.approx(1.0)
    rank1 = timeline.phase_seconds(1)
    assert rank1["idle"] == pytest.approx(0.22 + 0.03 + 0.4)  # wait, gap, tail
    assert rank1["forward"] == pytest.approx(0.15)
    assert timeline.phase_seconds(0)["send"] == pytest.approx(0.01)
    with pytest.raises(ValueError, match="no trace events for step 9"):
        step_timeline(events, 9)


def test_bubble_formula_and_median_skips_warmup() -> None:
    def rec(step: int, computes: tuple[float, ...], bubble: float) -> StepRecord:
        ranks = tuple(RankTiming(c, 0.0, 0.0, bubble, 0.0, c + bubble) for c in computes)
        return StepRecord(step, 1.0, 1.0, 1.0, 1.0, ranks)

    # slowest pipeline time 4 (3 + 1); compute 3 + 2 = 5 of 2 x 4 = 8 -> bubble 3/8.
    assert step_bubble(rec(2, (3.0, 2.0), 1.0)) == pytest.approx(3 / 8)
    records = [rec(1, (1.0, 1.0), 9.0), rec(2, (3.0, 2.0), 1.0), rec(3, (3.0, 3.0), 2.0),
               rec(4, (2.0, 2.0), 1.0)]
    assert measured_bubble(records) == pytest.approx(3 / 8)  # median of 3/8, 2/5, 1/3
    assert step_bubble(StepRecord(1, 1.0, 1.0, 1.0, 1.0, ())) is None
    assert typical_step(records, [0, 1, 2, 3]) == 1  # pipeline times 4, 5, 3 -> step 2
    assert typical_step(records, [2]) == 2
    # A restart's first step is warm-up too: left out like the run's first.
    restarted = [*records, StepRecord(5, 1.0, 1.0, 1.0, 1.0, (
        RankTiming(0.1, 0.0, 0.0, 9.0, 0.0, 9.1),), "b"),
        StepRecord(6, 1.0, 1.0, 1.0, 1.0, rec(6, (3.0, 2.0), 1.0).ranks, "b")]
    assert measured_bubble(restarted) == pytest.approx(3 / 8)  # 3/8, 2/5, 1/3, 3/8


@pytest.mark.parametrize("schedule,pp,m,v,expected", [
    ("gpipe", 2, 4, 1, 1 / 5), ("1f1b", 4, 8, 1, 3 / 11), ("1f1b", 1, 4, 1, 0.0),
])
def test_theoretical_bubble_matches_closed_form(schedule: str, pp: int, m: int, v: int,
                                                expected: float) -> None:
    assert theoretical_bubble(schedule, pp, m, v).fraction == pytest.approx(expected)


def test_zero_bubble_schedule_beats_1f1b() -> None:
    assert theoretical_bubble("zb-h1", 4, 8).fraction < theoretical_bubble("1f1b", 4, 8).fraction
    assert theoretical_bubble("interleaved", 4, 8, 2).fraction < (
        theoretical_bubble("1f1b", 4, 8).fraction)
    # ZB-H2 equals ZB-H1 at unit costs and beats it once B > W (3/28.6 vs 4.2/29.8)
    gpu_like = {Op.FORWARD: 1.0, Op.BACKWARD_INPUT: 1.3, Op.WEIGHT: 0.9}
    h1, h2 = (theoretical_bubble(s, 4, 8, 1, gpu_like) for s in ("zb-h1", "zb-h2"))
    assert h2.fraction == pytest.approx(h1.fraction)
    assert h2.with_measured_costs == pytest.approx(3 / 28.6)
    assert h1.with_measured_costs == pytest.approx(4.2 / 29.8)


def test_trace_errors_name_the_file(tmp_path: Path) -> None:
    path = tmp_path / "trace.json"
    path.write_text('{"traceEvents": [{"ph": "X", "pid": 0, "ts": 1, "dur": 2}]}')
    with pytest.raises(UserInputError, match=r"trace.json: traceEvents\[0\]: args"):
        read_trace(path)
    path.write_text('{"traceEvents": ')
    with pytest.raises(UserInputError, match=r"trace\.json: not a JSON trace"):
        read_trace(path)


def gantry(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "launcher", *args], capture_output=True,
                          text=True, cwd=REPO, check=False)


def test_cli_bad_input_is_one_line_exit_2(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "metrics.jsonl").write_text(line(1, 5.0) + "\n{oops}\n")
    for args, message in [
        ((str(run_dir),), f"error: {run_dir}/metrics.jsonl:2: not JSON"),
        ((str(run_dir), "--step", "0"), "error: --step: 0 is not allowed"),
        ((str(run_dir), "--spec", str(tmp_path / "nope.yaml")), "error: --spec: "),
        (("no-such-job", "--jobs-dir", str(tmp_path)), "error: job 'no-such-job': no such job"),
    ]:
        result = gantry("report", *args)
        assert result.returncode == 2, result.stderr
        assert result.stderr.startswith(message), result.stderr
        assert len(result.stderr.strip().splitlines()) == 1
    assert not (run_dir / "report").exists()


def test_cli_step_not_traced_is_refused_and_writes_nothing(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "metrics.jsonl").write_text(line(1, 5.0) + "\n")
    (run_dir / "trace.json").write_text(json.dumps({"traceEvents": [
        {"name": "forward s0 mb0", "cat": "compute", "ph": "X", "pid": 0, "tid": 0,
         "ts": 0.0, "dur": 5.0, "args": {"step": 0, "stage": 0, "micro_batch": 0}}]}))
    result = gantry("report", str(run_dir), "--step", "7")
    assert result.returncode == 2
    assert "--step: 7 is not allowed (traced steps: 1)" in result.stderr
    assert not (run_dir / "report").exists()


def test_demo_bad_input_is_refused_before_anything_starts(tmp_path: Path) -> None:
    work = tmp_path / "work"
    for args, message in [
        (("--steps", "1"), "error: --steps: 1 is not allowed (expected >= 2)"),
        (("--timeout", "0"), "error: --timeout: 0.0 is not allowed (expected seconds > 0)"),
        (("--faulty", "zz"), "error: --faulty: 'zz' is not allowed (expected a node of"),
        (("--site", str(REPO / "site_configs" / "example-large.yaml")),
         "slurm.embedded: false is not allowed for `gantry demo`"),
    ]:
        result = gantry("demo", "--work-dir", str(work), *args)
        assert result.returncode == 2, result.stderr
        assert message in result.stderr and len(result.stderr.strip().splitlines()) == 1
    assert not work.exists()


def test_theory_with_measured_op_costs() -> None:
    from launcher.report.theory import measured_op_costs

    events = [
        event(0, 0, "forward s0 mb0", "compute", 0.0, 9.0),  # warm-up step: left out
        event(0, 1, "forward s0 mb0", "compute", 0.0, 1.0),
        event(0, 1, "forward s0 mb1", "compute", 2.0, 5.0),
        event(0, 1, "backward_input s0 mb0", "compute", 5.0, 6.0),
        event(0, 1, "weight s0 mb0", "compute", 6.0, 10.0),
        event(0, 1, "send_act s0 mb0", "comm", 1.0, 1.5),
    ]
    costs = measured_op_costs(events)
    assert costs == {Op.FORWARD: 2.0, Op.BACKWARD_INPUT: 1.0, Op.WEIGHT: 4.0}
    assert measured_op_costs(events, virtual_stages=2)[Op.FORWARD] == 4.0
    # 1F1B's bubble does not depend on the F:B ratio; ZB-H1's does (W fills the bubble).
    assert theoretical_bubble("1f1b", 4, 8, 1, {Op.FORWARD: 1.0, Op.BACKWARD: 5.0}
                              ).with_measured_costs == pytest.approx(3 / 11)
    zb = theoretical_bubble("zb-h1", 4, 8, 1, costs)
    assert zb.with_measured_costs is not None
    assert zb.with_measured_costs != pytest.approx(zb.fraction)
    assert theoretical_bubble("zb-h1", 4, 8).with_measured_costs is None


def test_every_schedule_is_priced_at_the_runs_own_costs() -> None:
    """The report lists each schedule's bubble at the run's op times; the run's own schedule
    among them has the bubble the report gives it, a full backward split in halves for the
    zero-bubble ones."""
    full = {Op.FORWARD: 1.0, Op.BACKWARD: 2.6}
    theory = theoretical_bubble("1f1b", 2, 8, 1, full)
    alternatives = dict(theory.alternatives)
    assert list(alternatives) == ["gpipe", "1f1b", "interleaved v=2", "zb-h1", "zb-h2",
                                  "zb-interleaved v=2"]
    assert alternatives["1f1b"] == pytest.approx(theory.with_measured_costs)
    split = {Op.FORWARD: 1.0, Op.BACKWARD_INPUT: 1.3, Op.WEIGHT: 1.3}
    assert alternatives["zb-h1"] == pytest.approx(
        theoretical_bubble("zb-h1", 2, 8, 1, split).with_measured_costs)
    assert alternatives["zb-h2"] < alternatives["1f1b"]
    unit = dict(theoretical_bubble("zb-interleaved", 3, 4, 3).alternatives)
    assert "interleaved v=3" not in unit  # m = 4 is not a multiple of pp = 3
    assert unit["zb-interleaved v=3"] == pytest.approx(
        theoretical_bubble("zb-interleaved", 3, 4, 3).fraction)
