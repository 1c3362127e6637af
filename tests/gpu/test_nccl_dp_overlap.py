"""The overlapped data-parallel all-reduce on GPUs (dedicated DP stream and communicator,
buckets started from the gradients-ready hook during an eager backward) trains bit for bit
like GANTRY_DP_OVERLAP=0 at dp=2 (two-rank NCCL sums are a + b either way; autotuning off so
both processes pick the same kernels), and follows the fp32 PyTorch reference.

Needs 2 visible GPUs and a CUDA library built with NCCL (``GANTRY_CUDA_LIB``);
skips otherwise.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.gpu.gpus import need_gpus
from tests.gpu.test_nccl_pipeline import BATCH, LOSS_TOL, MODEL, _reference
from tests.integration.pipeline_helpers import gantry_train, read_metrics, write_job

SAME_KERNELS = {"GANTRY_GEMM_AUTOTUNE": "0", "GANTRY_ATTN_AUTOTUNE": "0"}


def _run(tmp_path: Path, lib: Path, name: str, m: int, weights: Path,
         env: dict[str, str]) -> list[dict[str, Any]]:
    job = write_job(tmp_path, name, pp=1, dp=2, schedule="1f1b", m=m, batch=BATCH,
                    model=MODEL, train={"init_weights": str(weights)})
    result = gantry_train(job, 2, lib, run_dir=tmp_path / name, env={**SAME_KERNELS, **env})
    assert result.returncode == 0, result.stderr[-3000:]
    return read_metrics(tmp_path / name)


@pytest.mark.parametrize("graphs", ["1", "0"])
def test_gpu_dp_overlap_matches_blocking(tmp_path: Path, nccl_lib: Path, graphs: str) -> None:
    need_gpus(2)
    m = 2
    weights = tmp_path / "init.safetensors"
    expected = _reference(2 * m, weights)
    # 0.05 MB: a layer of MODEL (d=64) is 0.19 MB, so one bucket per layer
    on = _run(tmp_path, nccl_lib, "on", m, weights,
              {"GANTRY_DP_OVERLAP": "1", "GANTRY_DP_BUCKET_MB": "0.05",
               "GANTRY_CUDA_GRAPHS": graphs})
    off = _run(tmp_path, nccl_lib, "off", m, weights,
               {"GANTRY_DP_OVERLAP": "0", "GANTRY_CUDA_GRAPHS": graphs})
    assert [r["loss"] for r in on] == [r["loss"] for r in off]
    assert [r["grad_norm"] for r in on] == [r["grad_norm"] for r in off]
    assert [r["loss"] for r in on] == pytest.approx(expected, rel=LOSS_TOL)
    # 4 layers + ln_f (merged with layer 3) + embeddings: 5 buckets per rank and step
    assert all(rank["dp_buckets"] == 5 for r in on for rank in r["ranks"])
    assert all(rank["dp_buckets"] == 0 for r in off for rank in r["ranks"])
