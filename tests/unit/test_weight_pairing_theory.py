"""bench/weight_pairing_theory.py: pairing the W passes of two micro-batches keeps every
dependency (the simulator proves the paired tables), and on the recorded 1.5B PP=2 rows
(2x H200, 2026-12-01) it reproduces the recorded makespans unpaired, finds the drain's
back-to-back W's, and shows that pairing every W loses more to the bubble than the measured
saving gains."""

from __future__ import annotations

import json
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from launcher.schedules import simulate
from launcher.schedules.table import Op, build_table

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "bench"))

import weight_pairing_theory as wpt  # noqa: E402

PP2_1_5B = REPO / "bench" / "results" / "gpu-bench-h200x2-2026-12-01-87a4aae.jsonl"


@pytest.mark.parametrize("name,pp,m,v", [("zb-h1", 2, 8, 1), ("zb-h2", 4, 8, 1),
                                         ("zb-interleaved", 2, 8, 2), ("zb-h1", 3, 5, 1)])
def test_paired_orders_keep_every_step_and_dependency(name: str, pp: int, m: int,
                                                      v: int) -> None:
    orders = wpt.split_backward_orders(name, pp, m, v)
    paired = wpt.pair_weight_steps(orders)
    for before, after in zip(orders, paired, strict=True):
        assert Counter(before) == Counter(after)
        weights = [step for step in after if step[0] is Op.WEIGHT]
        for op, s, mb in weights:  # each even W right before its odd partner, when both run
            if mb % 2 == 0 and (Op.WEIGHT, s, mb + 1) in weights:
                assert after[after.index((op, s, mb)) + 1] == (Op.WEIGHT, s, mb + 1)
    simulate(build_table(name, pp, v, m, paired))  # raises on a broken dependency or deadlock


def test_adjacent_pairs_are_the_back_to_back_weights() -> None:
    orders = wpt.split_backward_orders("zb-h1", 2, 8, 1)
    # zb-h1 at pp=2: rank 0 runs W right after each B; rank 1 ends with W6 W7
    assert wpt.adjacent_weight_pairs(orders) == [set(), {(1, 6), (1, 7)}]


def _rows() -> list[dict[str, Any]]:
    return wpt.recorded_rows(PP2_1_5B.read_text().splitlines())


def test_reproduces_the_recorded_makespans_and_prices_the_pairing() -> None:
    rows = _rows()
    assert {r["schedule"] for r in rows} == {"zb-h1", "zb-h2", "zb-interleaved"}
    for r in rows:
        v = 2 if r["schedule"] == "zb-interleaved" else 1
        out = wpt.compare(r["schedule"], 8, v, r["timeline"]["op_ms_by_rank"],
                          wpt.MEASURED_SAVING)
        assert out["makespan_ms"] == pytest.approx(r["timeline"]["makespan_theory_ms"], abs=0.01)
        assert out["makespan_all_paired_ms"] > out["makespan_ms"]  # the W's fill the bubble
        assert out["makespan_adjacent_paired_ms"] <= out["makespan_ms"]
        assert out["makespan_ms"] - out["makespan_adjacent_paired_ms"] < 0.01 * out["makespan_ms"]
        no_saving = wpt.compare(r["schedule"], 8, v, r["timeline"]["op_ms_by_rank"], 0.0)
        assert no_saving["makespan_adjacent_paired_ms"] == out["makespan_ms"]


def test_cli_prints_one_line_per_split_backward_row(capsys: pytest.CaptureFixture[str]) -> None:
    assert wpt.main(["weight_pairing_theory.py", str(PP2_1_5B)]) == 0
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [line["schedule"] for line in lines] == [r["schedule"] for r in _rows()]
