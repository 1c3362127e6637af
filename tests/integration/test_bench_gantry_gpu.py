"""bench/bench_gantry_gpu.py, the gantry side of the GPU benchmark, run for real on the CPU build
(tiny model, real `gantry train` under mpirun): every layout prints one JSON line whose tokens/s
follow from its measured step time, PP=2 adds the per-rank timeline and the bubble against the
simulator, DP=2 counts both replicas' tokens and reports the overlapped all-reduce's buckets.
A broken bench script costs a device call; this catches it on CPU first."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.fake_nvidia_smi import write_fake_nvidia_smi
from tests.integration.pipeline_helpers import MPI_ENV

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
import bench_gantry_gpu

REPO = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow

TINY = ["--layers", "4", "--dmodel", "16", "--heads", "2", "--seq", "8", "--vocab", "64",
        "--mbs", "2", "--nmb", "4", "--steps", "3", "--warmup", "1", "--timeout", "120"]
TOKENS_PER_REPLICA = 2 * 4 * 8  # mbs * nmb * seq


def _bench(tmp_path: Path, lib: Path, *args: str, env: dict[str, str] | None = None
           ) -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, "bench/bench_gantry_gpu.py", "--lib", str(lib), "--work",
         str(tmp_path / "work"), *TINY, *args],
        cwd=REPO, capture_output=True, text=True, timeout=300,
        env={**os.environ, **MPI_ENV, **(env or {})})
    assert done.returncode == 0, done.stdout + done.stderr
    lines = [ln for ln in done.stdout.splitlines() if ln.startswith("{")]
    assert len(lines) == 1, done.stdout
    result: dict[str, Any] = json.loads(lines[0])
    assert "error" not in result, result
    return result


def _check_rate(result: dict[str, Any], replicas: int) -> None:
    expected = TOKENS_PER_REPLICA * replicas / (result["step_ms"] / 1e3)
    assert result["tokens_per_s"] == pytest.approx(expected, rel=0.01, abs=1.0)
    assert result["last_loss"] < result["first_loss"] + 1.0  # it trained, finitely


def test_single(tmp_path: Path, native_lib_path: Path) -> None:
    result = _bench(tmp_path, native_lib_path, "--layout", "single")
    assert result["mode"] == "single" and result["schedule"] == "-"
    _check_rate(result, 1)
    assert "timeline" not in result and "dp_ranks" not in result and "gpu_clocks" not in result


def test_gpu_clocks_while_busy_are_in_the_json(tmp_path: Path, native_lib_path: Path) -> None:
    """With an nvidia-smi (here the stand-in, through GANTRY_NVIDIA_SMI) the result carries the
    busy samples' SM clocks and power (bench/gpu_clocks.py); without one (test_single) none."""
    smi = write_fake_nvidia_smi(tmp_path)
    result = _bench(tmp_path, native_lib_path, "--layout", "single",
                    env={"GANTRY_NVIDIA_SMI": str(smi)})
    (gpu,) = result["gpu_clocks"]
    assert gpu["index"] == 0 and gpu["busy_samples"] >= 2
    assert 1700 <= gpu["sm_mhz_mean"] <= 1800 and 0 < gpu["power_capped_share"] < 1


def test_pp2_reports_timeline_and_bubble(tmp_path: Path, native_lib_path: Path) -> None:
    result = _bench(tmp_path, native_lib_path, "--layout", "pp2", "--schedule", "zb-h2",
                    "--variant", "cpu check")
    assert (result["mode"], result["schedule"], result["variant"]) == ("pp2", "zb-h2",
                                                                      "cpu check")
    _check_rate(result, 1)
    t = result["timeline"]
    assert len(t["ranks"]) == 2
    for r in t["ranks"]:
        assert r["compute_s"] > 0 and r["total_s"] >= r["compute_s"]
    assert 0.0 <= t["bubble_measured"] < 1.0
    assert 0.0 < t["bubble_theory_unit"] < 1.0
    assert set(t["op_ms"]) == {"forward", "backward_input", "weight"}
    by_rank = t["op_ms_by_rank"]
    assert len(by_rank) == 2
    for ops in by_rank:  # 4 micro-batches: 4 of each op per rank, the sum 4 x the mean
        assert set(ops) == {"forward", "backward_input", "weight"}
        for mean, total in ops.values():
            assert total == pytest.approx(4 * mean, rel=0.02, abs=0.02)
    # rank 0's summed op times are its compute time (the executor times the same actions)
    summed = sum(total for _, total in by_rank[0].values())
    assert summed == pytest.approx(t["ranks"][0]["compute_s"], rel=0.1, abs=0.5)
    # where each rank's blocked time sits: [ms into the step, ms waited, what], in time order,
    # within the rank's measured bubble and blocked sends / receives
    waits = t["waits_by_rank"]
    assert len(waits) == 2
    for rank, rank_waits in enumerate(waits):
        starts = [w[0] for w in rank_waits]
        assert starts == sorted(starts) and all(w[0] >= 0 and w[1] >= 0.3 for w in rank_waits)
        assert all(str(w[2]).startswith("wait ") for w in rank_waits)
        r = t["ranks"][rank]
        assert sum(w[1] for w in rank_waits) <= r["bubble_s"] + r["send_s"] + r["recv_s"] + 0.5
    # with no threshold: every blocked wait of the trace's last step, per rank (which rank
    # blocks, and how often, depends on timing); the report keeps those of >= 0.3 ms
    trace = json.loads((tmp_path / "work" / "run" / "trace.json").read_text())
    spans = [e for e in trace["traceEvents"] if e.get("ph") == "X"]
    last = max(e["args"]["step"] for e in spans)
    all_waits = bench_gantry_gpu.waits_by_rank(trace, last, min_ms=0.0)
    blocked = [sorted(e["name"] for e in spans if e["args"]["step"] == last
                      and e["pid"] == rank and e["cat"] == "wait") for rank in (0, 1)]
    assert [sorted(str(w[2]) for w in rank_waits) for rank_waits in all_waits] == blocked
    for rank_waits, kept in zip(all_waits, waits, strict=True):
        assert all(w in rank_waits for w in kept)
    # the simulator with each rank's own measured costs: a theory of the same phase
    assert 0.0 <= t["bubble_theory_rank_costs"] < 1.0
    assert t["makespan_theory_ms"] > 0 and t["makespan_ms"] > 0
    assert t["makespan_theory_ms"] >= max(sum(total for _, total in ops.values())
                                          for ops in by_rank) - 0.05
    # no clipping by default (like the anchor): AdamW ran range by range during the backward
    # on pipeline rank 0 (its layers and wpe; the tied wte copy after the table), after the
    # table on rank 1 (GANTRY_OPT_OVERLAP=2, the default)
    assert result["grad_clip"] == 0.0
    assert result["opt_ranges"][0] > 0 and result["opt_ranges"][1] == 0


def test_virtual_stages_of_a_chunked_schedule(tmp_path: Path, native_lib_path: Path) -> None:
    """--virtual-stages 3: zb-interleaved with three chunks per rank (six stages of one layer
    each): the job asks for them, the trace's compute spans name all six stages, and the
    timeline's theory comes from the same table."""
    result = _bench(tmp_path, native_lib_path, "--layout", "pp2", "--schedule", "zb-interleaved",
                    "--virtual-stages", "3", "--layers", "6")
    assert (result["schedule"], result["virtual_stages"]) == ("zb-interleaved", 3)
    _check_rate(result, 1)
    job = (tmp_path / "work" / "job.yaml").read_text()
    assert "virtual_stages: 3" in job
    trace = json.loads((tmp_path / "work" / "run" / "trace.json").read_text())
    stages = {e["args"].get("stage") for e in trace["traceEvents"]
              if e.get("ph") == "X" and e.get("cat") == "compute"}
    assert stages == set(range(6)), stages
    assert 0.0 < result["timeline"]["bubble_theory_unit"] < 1.0


def test_bad_virtual_stages_are_one_line_errors(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, "bench/bench_gantry_gpu.py", "--lib", "x", "--work",
                           str(tmp_path), "--virtual-stages", "0"], cwd=REPO,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    assert "error: --virtual-stages 0: expected at least 1" in done.stderr.splitlines()[-1]


def test_clipping_updates_after_the_table(tmp_path: Path, native_lib_path: Path) -> None:
    result = _bench(tmp_path, native_lib_path, "--layout", "pp2", "--schedule", "1f1b",
                    "--grad-clip", "1.0")
    assert result["grad_clip"] == 1.0 and result["opt_ranges"] == [0, 0]


def test_dp2_counts_both_replicas_and_the_overlapped_buckets(tmp_path: Path,
                                                              native_lib_path: Path) -> None:
    on = _bench(tmp_path / "on", native_lib_path, "--layout", "dp2",
                env={"GANTRY_DP_OVERLAP": "1", "GANTRY_DP_BUCKET_MB": "0"})
    assert on["mode"] == "dp2"
    _check_rate(on, 2)
    assert len(on["dp_ranks"]) == 2
    # a bucket per layer (4), ln_f and the head's wte, and the embeddings
    assert all(r["dp_buckets"] > 4 for r in on["dp_ranks"]), on["dp_ranks"]
    # the variable reached the ranks: with overlap off no bucket is started
    off = _bench(tmp_path / "off", native_lib_path, "--layout", "dp2",
                 env={"GANTRY_DP_OVERLAP": "0"})
    assert all(r["dp_buckets"] == 0 for r in off["dp_ranks"]), off["dp_ranks"]
    assert off["first_loss"] == on["first_loss"]


def test_pp2xdp2_has_the_timeline_of_four_ranks_and_both_replicas_tokens(
        tmp_path: Path, native_lib_path: Path) -> None:
    result = _bench(tmp_path, native_lib_path, "--layout", "pp2xdp2", "--schedule", "zb-h1")
    assert (result["mode"], result["schedule"]) == ("pp2xdp2", "zb-h1")
    _check_rate(result, 2)
    assert len(result["timeline"]["ranks"]) == 4 and len(result["dp_ranks"]) == 4


@pytest.mark.parametrize("text,layout", [("single", (1, 1)), ("pp2", (2, 1)), ("dp4", (1, 4)),
                                         ("pp4xdp2", (4, 2))])
def test_layouts(text: str, layout: tuple[int, int]) -> None:
    assert bench_gantry_gpu.parse_layout(text) == layout


@pytest.mark.parametrize("text", ["pp1", "dp0", "pp2xdp0", "pp", "2x2", "PP2", "pp2xdp2x"])
def test_bad_layouts_are_one_line_errors(text: str) -> None:
    done = subprocess.run([sys.executable, "bench/bench_gantry_gpu.py", "--lib", "x", "--work",
                           "/nonexistent", "--layout", text], cwd=REPO, capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 2
    assert f"error: layout '{text}' is not allowed" in done.stderr.splitlines()[-1]
