"""bench/anchors/torch_pp_baseline.py, the PyTorch anchor, run for real on CPU (gloo, fp32, tiny
model) under torchrun: PP x DP layouts (DDP over each pipeline position's dp group, inside
torch.distributed.pipelining's schedules) and plain DP print one JSON line whose tokens/s count
every replica, the layout says which ranks form a pipeline, and the dp replicas end with the same
parameters (with --no-ddp, the control, they do not, and the run fails). --dp 1 keeps the anchor's
original keys. A broken anchor costs a device call; this catches it on CPU first."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]
ANCHOR = REPO / "bench" / "anchors" / "torch_pp_baseline.py"
pytestmark = pytest.mark.slow

TINY = ["--layers", "4", "--dmodel", "32", "--heads", "2", "--seq", "16", "--vocab", "64",
        "--mbs", "2", "--nmb", "4", "--steps", "2", "--warmup", "1", "--device", "cpu"]
TOKENS_PER_REPLICA = 2 * 4 * 16  # mbs * nmb * seq
# The keys the anchor printed before DP existed (the shared anchor's arguments and results).
ORIGINAL_KEYS = {"mode", "schedule", "layers", "d", "heads", "seq", "vocab", "mbs", "nmb", "steps",
                 "warmup", "tokens_per_s", "step_ms", "tflops_per_gpu", "peak_bf16_tflops", "mfu"}


def _anchor(nproc: int, *args: str, expect_rc: int = 0) -> dict[str, Any]:
    """Runs the anchor (under torchrun when nproc > 0) and returns its one JSON line."""
    launch = ([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node",
               str(nproc)] if nproc else [sys.executable])
    done = subprocess.run([*launch, str(ANCHOR), *TINY, *args], cwd=REPO, capture_output=True,
                          text=True, timeout=300, env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert done.returncode == expect_rc, done.stdout + done.stderr[-4000:]
    lines = [ln for ln in done.stdout.splitlines() if ln.startswith("{")]
    assert len(lines) == 1, done.stdout + done.stderr[-4000:]
    result: dict[str, Any] = json.loads(lines[0])
    return result


def _check_rate(result: dict[str, Any], replicas: int) -> None:
    assert result["tokens_per_s"] > 0
    expected = TOKENS_PER_REPLICA * replicas / (result["step_ms"] / 1e3)
    assert result["tokens_per_s"] == pytest.approx(expected, rel=0.01, abs=1.0)


@pytest.mark.parametrize("schedule", ["f1b", "gpipe", "interleaved"])
def test_pp2_dp2_replicas_stay_in_sync(schedule: str) -> None:
    result = _anchor(4, "--mode", "pp", "--schedule", schedule, "--dp", "2", "--check-sync")
    assert (result["pp"], result["dp"], result["world"]) == (2, 2, 4)
    assert result["pipelines"] == [[0, 1], [2, 3]]
    _check_rate(result, replicas=2)
    sums = result["param_checksums"]  # [pipeline position][replica]
    assert len(sums) == 2 and all(len(s) == 2 for s in sums)
    assert sums[0][0] != sums[1][0]  # the two stages hold different parameters
    assert all(s[0] == s[1] for s in sums), sums
    assert result["replicas_in_sync"] is True
    assert result["peak_bf16_tflops"] is None and result["mfu"] is None  # no bf16 peak on CPU


def test_pp2_dp2_without_ddp_is_caught() -> None:
    """The control: replicas that train on their own data without DDP drift apart, the check
    says so and the anchor exits 1."""
    result = _anchor(4, "--mode", "pp", "--dp", "2", "--check-sync", "--no-ddp", expect_rc=1)
    assert result["replicas_in_sync"] is False
    assert all(s[0] != s[1] for s in result["param_checksums"]), result["param_checksums"]


def test_dp_mode_over_all_ranks() -> None:
    result = _anchor(2, "--mode", "dp", "--check-sync")
    assert (result["pp"], result["dp"], result["world"]) == (1, 2, 2)
    assert result["pipelines"] == [[0], [1]]
    _check_rate(result, replicas=2)
    assert result["replicas_in_sync"] is True
    assert result["param_checksums"][0][0] == result["param_checksums"][0][1]


def test_dp1_keeps_the_original_keys() -> None:
    pp = _anchor(2, "--mode", "pp", "--schedule", "f1b")
    assert pp.keys() >= ORIGINAL_KEYS, ORIGINAL_KEYS - pp.keys()
    assert (pp["pp"], pp["dp"], pp["world"], pp["pipelines"]) == (2, 1, 2, [[0, 1]])
    assert "param_checksums" not in pp and "replicas_in_sync" not in pp
    _check_rate(pp, replicas=1)
    single = _anchor(0)
    assert single.keys() >= ORIGINAL_KEYS, ORIGINAL_KEYS - single.keys()
    _check_rate(single, replicas=1)
