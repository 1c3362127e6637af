"""AdamW overlapped with the backward on GPUs (clipping off: each range the gradients-ready
hook reports is updated on the stage's optimizer stream while the backward goes on, the tied
wte copies after their all-reduce) trains bit for bit like GANTRY_OPT_OVERLAP=0 (autotuning
off so both runs pick the same kernels), at PP=1 and PP=2 (zb-h2, copy-engine edges), with
CUDA graphs, and follows the fp32 PyTorch reference trained without clipping. At PP=2 so does
GANTRY_OPT_OVERLAP=2 (rank 0 early, rank 1 after the table, its update running into the next
step's first receive, which is posted without waiting for it). An early-updating rank sums its
gradient norm from the AdamW ranges (another order of the same sum: equal to 1e-12).

Needs a GPU (2 for the PP=2 cases) and a CUDA library built with NCCL (``GANTRY_CUDA_LIB``);
skips otherwise.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest

from tests.gpu.gpus import need_gpus
from tests.gpu.test_nccl_dp_overlap import SAME_KERNELS
from tests.gpu.test_nccl_pipeline import BATCH, LOSS_TOL, MODEL, _reference
from tests.integration.pipeline_helpers import gantry_train, read_metrics, train_settings, write_job

NO_CLIP = dataclasses.replace(train_settings(), grad_clip=0.0)


def _run(tmp_path: Path, lib: Path, name: str, pp: int, weights: Path,
         env: dict[str, str], schedule: str = "", v: int = 1) -> list[dict[str, Any]]:
    job = write_job(tmp_path, name, pp=pp, dp=1,
                    schedule=schedule or ("zb-h2" if pp > 1 else "1f1b"), m=4, v=v,
                    batch=BATCH, model=MODEL,
                    train={"init_weights": str(weights), "grad_clip": 0.0})
    result = gantry_train(job, pp, lib, run_dir=tmp_path / name, env={**SAME_KERNELS, **env})
    assert result.returncode == 0, result.stderr[-3000:]
    return read_metrics(tmp_path / name)


@pytest.mark.parametrize("pp", [1, 2])
def test_gpu_opt_overlap_matches_update_after_table(tmp_path: Path, nccl_lib: Path,
                                                    pp: int) -> None:
    need_gpus(pp)
    weights = tmp_path / "init.safetensors"
    expected = _reference(4, weights, NO_CLIP)
    on = _run(tmp_path, nccl_lib, "on", pp, weights, {"GANTRY_OPT_OVERLAP": "1"})
    off = _run(tmp_path, nccl_lib, "off", pp, weights, {"GANTRY_OPT_OVERLAP": "0"})
    assert [r["loss"] for r in on] == [r["loss"] for r in off]
    assert [r["grad_norm"] for r in on] == pytest.approx([r["grad_norm"] for r in off],
                                                         rel=1e-12)
    assert [r["loss"] for r in on] == pytest.approx(expected, rel=LOSS_TOL)
    # every layer once, ln_f and the embeddings (wpe alone where wte is a tied copy)
    assert all(sum(rank["opt_ranges"] for rank in r["ranks"]) == MODEL["n_layer"] + 2
               for r in on)
    assert all(rank["opt_ranges"] == 0 for r in off for rank in r["ranks"])
    if pp > 1:
        first = _run(tmp_path, nccl_lib, "first", pp, weights, {"GANTRY_OPT_OVERLAP": "2"})
        assert [r["loss"] for r in first] == [r["loss"] for r in off]
        assert [r["grad_norm"] for r in first] == pytest.approx(
            [r["grad_norm"] for r in off], rel=1e-12)
        assert all(r["ranks"][0]["opt_ranges"] > 0 == r["ranks"][1]["opt_ranges"]
                   for r in first)


def test_gpu_opt_overlap_3_keeps_the_last_chunk_for_the_fill(tmp_path: Path,
                                                             nccl_lib: Path) -> None:
    """GANTRY_OPT_OVERLAP=3 at PP=2, zb-interleaved with 2 chunks per rank: rank 1 updates its
    chunk finished first from the hook and the other after the table, the same bits as 0."""
    need_gpus(2)
    weights = tmp_path / "init.safetensors"
    _reference(4, weights, NO_CLIP)
    kw: dict[str, Any] = {"schedule": "zb-interleaved", "v": 2}
    most = _run(tmp_path, nccl_lib, "most", 2, weights, {"GANTRY_OPT_OVERLAP": "3"}, **kw)
    off = _run(tmp_path, nccl_lib, "off", 2, weights, {"GANTRY_OPT_OVERLAP": "0"}, **kw)
    every = _run(tmp_path, nccl_lib, "every", 2, weights, {"GANTRY_OPT_OVERLAP": "1"}, **kw)
    assert [r["loss"] for r in most] == [r["loss"] for r in off]
    assert [r["grad_norm"] for r in most] == pytest.approx([r["grad_norm"] for r in off],
                                                           rel=1e-12)
    for r, e in zip(most, every, strict=True):
        assert r["ranks"][0]["opt_ranges"] == e["ranks"][0]["opt_ranges"] > 0
        assert 0 < r["ranks"][1]["opt_ranges"] < e["ranks"][1]["opt_ranges"]
