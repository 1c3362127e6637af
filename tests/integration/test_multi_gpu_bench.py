"""bench/run_multi_gpu_bench.sh (issue 11's benchmark for 4- and 8-GPU machines) run end to end
on CPU (MULTI_BENCH_CPU=1: the CPU build of the native library, the PyTorch anchor on gloo, a
tiny model, 4 ranks): every layout's gantry runs and anchor runs land in results.jsonl and the
table pairs each gantry row with the anchor's run of the same layout. The GPU machines are
lent for minutes; a broken driver script would waste them."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from tests.integration.pipeline_helpers import MPI_ENV

REPO = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow


def test_cpu_run_of_every_layout_kind(tmp_path: Path, native_lib_path: Path) -> None:
    out = tmp_path / "out"
    env = {**os.environ, **MPI_ENV, "MULTI_BENCH_CPU": "1", "NGPU": "4", "MODELS": "tiny",
           "LAYOUTS": "pp4 pp2xdp2 dp2", "PP_SCHEDULES": "1f1b zb-h2",
           "ANCHOR_SCHEDULES": "f1b", "GPU_BENCH_STEPS": "2", "GPU_BENCH_WARMUP": "1",
           "GANTRY_NATIVE_LIB": str(native_lib_path), "OUT": str(out),
           "GPU_BENCH_WORK": str(tmp_path / "work")}
    done = subprocess.run(["bash", "bench/run_multi_gpu_bench.sh", "layouts", "table"],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    rows = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()
            if line.startswith("{")]
    ours = {(r["mode"], r["schedule"]) for r in rows if r.get("impl") == "gantry"
            and "error" not in r}
    assert ours == {("pp4", "1f1b"), ("pp4", "zb-h2"), ("pp2xdp2", "1f1b"),
                    ("pp2xdp2", "zb-h2"), ("dp2", "-")}, rows
    anchors = {(r["mode"], r.get("pp"), r.get("dp")) for r in rows if r.get("impl") != "gantry"}
    assert anchors == {("pp", 4, 1), ("pp", 2, 2), ("dp", 1, 2)}, rows
    table = (out / "table.md").read_text()
    for layout in ("PP=4", "PP=2 x DP=2", "DP=2"):
        lines = [ln for ln in table.splitlines()
                 if ln.startswith(f"| 8L-d32 | {layout} |") and "x** |" in ln]
        assert lines, f"no gantry row of {layout} with a ratio:\n{table}"
