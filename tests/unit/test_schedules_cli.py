"""`gantry schedules`: every schedule's theory for one layout, the same numbers the simulator
gives its tables, measured costs honoured, a timeline that shows every op, layouts from a job
file, and one-line errors for bad flags."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from launcher.cli import main
from launcher.schedules import CHUNKED, SCHEDULES, generate, simulate
from launcher.schedules.compare import parse_costs
from launcher.schedules.simulator import with_unit_defaults
from launcher.schedules.table import Op

REPO = Path(__file__).resolve().parents[2]


def _json(capsys: pytest.CaptureFixture[str], *args: str) -> dict[str, Any]:
    assert main(["schedules", "--json", *args]) == 0
    return dict(json.loads(capsys.readouterr().out))


def test_every_schedule_matches_its_simulated_table(capsys: pytest.CaptureFixture[str]) -> None:
    out = _json(capsys, "--pp", "4", "-m", "8", "-v", "2", "--costs", "F=1,B=1.2,W=0.85")
    assert [row["schedule"] for row in out["schedules"]] == list(SCHEDULES)
    costs = with_unit_defaults({Op.FORWARD: 1.0, Op.BACKWARD_INPUT: 1.2, Op.WEIGHT: 0.85})
    for row in out["schedules"]:
        v = 2 if row["schedule"] in CHUNKED else 1
        result = simulate(generate(row["schedule"], 4, 8, v), costs)
        assert row["bubble"] == pytest.approx(result.bubble_fraction, abs=1e-6)
        assert row["makespan"] == pytest.approx(result.makespan)
        assert row["peak_in_flight"] == result.peak_in_flight
        assert row["activations_held"] == [n / v for n in result.peak_in_flight]
    by_name = {row["schedule"]: row for row in out["schedules"]}
    assert by_name["zb-h2"]["bubble"] < by_name["1f1b"]["bubble"]
    assert by_name["gpipe"]["peak_in_flight"] == [8, 8, 8, 8]


def test_unit_costs_give_the_textbook_bubbles(capsys: pytest.CaptureFixture[str]) -> None:
    out = _json(capsys)  # pp 2, 8 micro-batches, v 2
    bubble = {row["schedule"]: row["bubble"] for row in out["schedules"]}
    assert bubble["1f1b"] == pytest.approx(1 / 9, abs=1e-6)  # (pp-1) / (m+pp-1)
    assert bubble["zb-h1"] == pytest.approx(1 / 25, abs=1e-6)  # (pp-1) / (3m+pp-1)


def test_timeline_draws_every_op_of_every_rank(capsys: pytest.CaptureFixture[str]) -> None:
    out = _json(capsys, "--timeline",
                "--width", "400", "-m", "4")
    for row in out["schedules"]:
        lines = row["timeline"]
        assert len(lines) == 2 and all(len(line) == 400 for line in lines)
        chunks = row["virtual_stages"]
        for line in lines:
            assert line.count("F") == 4 * chunks
            assert line.count("B") == 4 * chunks
            assert line.count("W") == (4 * chunks if row["schedule"].startswith("zb") else 0)
        assert lines[1].startswith(".")  # the last rank waits for its first input


def test_layout_from_a_job_file(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    job = yaml.safe_load((REPO / "examples" / "gpt2-tiny-pp2-dp2.yaml").read_text())
    job["parallelism"].update(pp=3, micro_batches=6)
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(job))
    out = _json(capsys, "--job", str(path))
    assert (out["pp"], out["micro_batches"]) == (3, 6)
    out = _json(capsys, "--job", str(path), "-m", "4")  # a flag wins over the file
    interleaved = next(r for r in out["schedules"] if r["schedule"] == "interleaved")
    assert "multiple of pp(3)" in interleaved["error"]


def test_table_output_names_the_layout(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["schedules", "--pp", "2", "-m", "8", "--timeline", "--width", "60"]) == 0
    text = capsys.readouterr().out
    assert "pp=2, 8 micro-batches" in text and "zb-interleaved (v=2)" in text
    assert text.count("rank 0 |") == len(SCHEDULES)


@pytest.mark.parametrize("args,needle", [
    (["--pp", "0"], "--pp: 0 is not allowed"),
    (["-m", "-3"], "--micro-batches: -3 is not allowed"),
    (["-v", "1"], "--virtual-stages: 1 is not allowed (expected 2..4096)"),
    (["--costs", "X=1"], "--costs: 'X=1' is not allowed"),
    (["--costs", "F=abc"], "--costs: 'F=abc' is not allowed"),
    (["--costs", "W=-1"], "--costs: 'W=-1' is not allowed"),
    (["--width", "3"], "--width: 3 is not allowed"),
    (["--pp", "4096", "-m", "4096"], "is too many"),
    (["--job", "/nonexistent/job.yaml"], "/nonexistent/job.yaml"),
])
def test_bad_flags_are_one_line_errors(capsys: pytest.CaptureFixture[str], args: list[str],
                                       needle: str) -> None:
    with pytest.raises(SystemExit) as exit_info:
        raise SystemExit(main(["schedules", *args]))
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: ") and needle in lines[0], err


def test_parse_costs_returns_the_letters_given() -> None:
    assert parse_costs("B=2") == {Op.BACKWARD_INPUT: 2.0}
    assert parse_costs(" f=0.5 , w=3 ") == {Op.FORWARD: 0.5, Op.WEIGHT: 3.0}
    assert parse_costs("") == {}


def test_the_job_spec_names_the_schedules_the_generators_have() -> None:
    """job_spec.Schedule (for the type checker and the job-spec reference) spells the list
    launcher.schedules owns, and every name on it generates."""
    import typing

    from launcher.schedule_names import Schedule

    assert typing.get_args(Schedule) == SCHEDULES
    assert set(CHUNKED) < set(SCHEDULES)
    for name in SCHEDULES:
        assert generate(name, 2, 4, 2 if name in CHUNKED else 1).name == name
