"""bench/gpu_bench_table.py: the GPU benchmark's markdown tables from a run's results.jsonl,
checked on the recorded 2x H200 results of commit 7d9a3e4 (bench/results/) and against
the numbers docs/BENCHMARKS.md states for them."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "bench"))

import gpu_bench_table  # noqa: E402

RESULTS = REPO / "bench" / "results"
FINAL = RESULTS / "gpu-bench-h200x2-2026-11-30-7d9a3e4-4.jsonl"
ONE_GPU = RESULTS / "gpu-bench-h200x1-2026-12-03-5bc7aee.jsonl"
CURRENT = {("350M", "1 GPU"): ONE_GPU,
           ("350M", "PP=2"): RESULTS / "gpu-bench-h200x2-2026-11-30-5045009-2.jsonl",
           ("1.5B", "1 GPU"): ONE_GPU,
           ("1.5B", "PP=2"): RESULTS / "gpu-bench-h200x2-2026-12-01-87a4aae.jsonl"}
"""The runs docs/BENCHMARKS.md's current GPU section reports, per model and layout (one build
each)."""


def _rows(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _table_rows(markdown: str) -> dict[tuple[str, str, str], list[str]]:
    """(model, layout, schedule) -> cells of the gantry table."""
    rows: dict[tuple[str, str, str], list[str]] = {}
    for line in markdown.split("PyTorch rows of the same call")[0].splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 9 and cells[0] in ("350M", "1.5B"):
            rows[(cells[0], cells[1], cells[2])] = cells
    return rows


def test_ratio_is_gantry_over_the_best_pytorch_schedule_of_the_same_call() -> None:
    rows = _rows(FINAL)
    table = _table_rows(gpu_bench_table.tables(rows))
    ours = [r for r in rows if r.get("impl") == "gantry" and r["mode"] in ("single", "pp2")]
    assert len(ours) == 12
    assert len(table) == 14  # and the two DP=2 variants
    for r in ours:
        model = "350M" if r["layers"] == 24 else "1.5B"
        layout = "1 GPU" if r["mode"] == "single" else "PP=2"
        torch = [t for t in rows if t.get("impl") != "gantry" and t["layers"] == r["layers"]
                 and (t["mode"] == "single") == (r["mode"] == "single")]
        best = max(t["tokens_per_s"] for t in torch)
        cells = table[(model, layout, r["schedule"])]
        assert cells[8] == f"**{r['tokens_per_s'] / best:.2f}x**"


def test_dp2_rows_have_their_own_layout_and_no_pytorch_ratio() -> None:
    table = _table_rows(gpu_bench_table.tables(_rows(FINAL)))
    dp = {k: v for k, v in table.items() if k[1] == "DP=2"}
    assert sorted(k[2] for k in dp) == ["- (dp overlap, 0 CTAs)", "- (dp overlap, 8 CTAs)"]
    assert all(cells[8] == "-" for cells in dp.values())


def test_variants_and_failures_get_their_own_rows() -> None:
    base = {"impl": "gantry", "mode": "pp2", "layers": 24, "d": 1024, "mbs": 8, "nmb": 8,
            "schedule": "1f1b"}
    rows = [
        {**base, "tokens_per_s": 300_000, "tflops_per_gpu": 360.0, "mem_used_gib": 14.0,
         "variant": "nccl default ctas"},
        {**base, "tokens_per_s": 330_000, "tflops_per_gpu": 400.0, "mem_used_gib": 13.0},
        {**base, "schedule": "gpipe", "error": "exit 1: timed out after 90 s"},
        {"mode": "pp", "schedule": "f1b", "layers": 24, "tokens_per_s": 250_000,
         "tflops_per_gpu": 300.0, "peak_bf16_tflops": 800.0},
    ]
    table = _table_rows(gpu_bench_table.tables(rows))
    assert table[("350M", "PP=2", "1f1b (nccl default ctas)")][8] == "**1.20x**"
    assert table[("350M", "PP=2", "1f1b")][8] == "**1.32x**"
    assert table[("350M", "PP=2", "1f1b")][4] == "50.0%"  # MFU against the anchor's peak
    assert table[("350M", "PP=2", "gpipe")][3].startswith("failed: exit 1: timed out")


def test_clock_table_lists_each_run_that_recorded_its_clocks() -> None:
    base = {"layers": 48, "d": 1600, "mbs": 4, "nmb": 8, "tokens_per_s": 90_000,
            "tflops_per_gpu": 450.0}
    clocks = [{"index": 0, "busy_samples": 30, "sm_mhz_mean": 1712, "power_w_mean": 604,
               "power_capped_share": 0.95, "thermal_share": 0.0},
              {"index": 1, "busy_samples": 29, "sm_mhz_mean": 1720, "power_w_mean": 611,
               "power_capped_share": 0.9, "thermal_share": 0.0}]
    rows = [{**base, "impl": "gantry", "mode": "pp2", "schedule": "zb-h2", "mem_used_gib": 47.8,
             "gpu_clocks": clocks},
            {**base, "mode": "pp", "schedule": "gpipe", "peak_bf16_tflops": 780.0,
             "gpu_clocks": clocks[:1]},
            {**base, "mode": "pp", "schedule": "f1b", "peak_bf16_tflops": 780.0}]
    text = gpu_bench_table.tables(rows)
    lines = text.split("GPU clocks while busy")[1].splitlines()
    assert ("| gantry | 1.5B | PP=2 | zb-h2 | GPU0 1712 / 604 / 95%; GPU1 1720 / 611 / 90% |"
            in lines)
    assert "| PyTorch | 1.5B | PP=2 | gpipe | GPU0 1712 / 604 / 95% |" in lines
    assert not any("f1b" in line for line in lines)  # no clocks recorded: no row
    assert "GPU clocks" not in gpu_bench_table.tables(rows[2:])


@pytest.mark.parametrize("key", [
    ("350M", "1 GPU", "-"), ("350M", "PP=2", "zb-h2"), ("1.5B", "1 GPU", "-"),
    ("1.5B", "PP=2", "zb-h2"), ("1.5B", "PP=2", "interleaved"),
])
def test_benchmarks_doc_states_what_the_recorded_call_gives(
        key: tuple[str, str, str]) -> None:
    cells = _table_rows(gpu_bench_table.tables(_rows(CURRENT[key[0], key[1]])))[key]
    tokens, ratio = cells[3], cells[8]
    doc = (REPO / "docs" / "BENCHMARKS.md").read_text()
    current = doc.split("## GPU: gantry vs PyTorch,")[1].split("\n## ")[0]
    model, layout, schedule = key
    pattern = re.compile(rf"^\| {re.escape(model)}[^|]* \| {re.escape(layout)} \| "
                         rf"{re.escape(schedule)}( \(v=2\))? \| {re.escape(tokens)} \|")
    lines = [ln for ln in current.splitlines() if pattern.match(ln)]
    assert len(lines) == 1, f"no single row for {key} with {tokens} in the current GPU section"
    assert ratio in lines[0]


@pytest.mark.parametrize("row,label", [
    ({"mode": "single"}, "1 GPU"), ({"mode": "pp2"}, "PP=2"), ({"mode": "pp4xdp2"}, "PP=4 x DP=2"),
    ({"mode": "dp8"}, "DP=8"), ({"mode": "pp"}, "PP=2"), ({"mode": "pp", "pp": 4, "dp": 2},
                                                         "PP=4 x DP=2"),
    ({"mode": "pp", "pp": 8, "dp": 1}, "PP=8"), ({"mode": "dp", "world": 4, "dp": 4}, "DP=4"),
])
def test_layout_labels_of_gantry_and_anchor_rows(row: dict[str, Any], label: str) -> None:
    assert gpu_bench_table._layout(row) == label


def test_anchor_dp_rows_are_the_reference_of_the_same_layout() -> None:
    gantry = {"impl": "gantry", "mode": "pp2xdp2", "schedule": "1f1b", "layers": 48,
              "tokens_per_s": 200_000, "tflops_per_gpu": 300.0, "mem_used_gib": 30.0}
    rows = [gantry,
            {"mode": "pp", "pp": 2, "dp": 2, "schedule": "f1b", "layers": 48,
             "tokens_per_s": 160_000, "tflops_per_gpu": 240.0, "peak_bf16_tflops": 800.0},
            {"mode": "pp", "pp": 2, "dp": 1, "schedule": "f1b", "layers": 48,
             "tokens_per_s": 75_000, "tflops_per_gpu": 390.0, "peak_bf16_tflops": 800.0}]
    table = _table_rows(gpu_bench_table.tables(rows))
    assert table[("1.5B", "PP=2 x DP=2", "1f1b")][8] == "**1.25x**"
