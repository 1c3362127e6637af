"""`gantry train` on GPUs: the CUDA stages driven by the pipeline executor with the NCCL
communicator, under real mpirun ranks (one GPU each), for every schedule at PP=2, against the
fp32 PyTorch reference trained on the same global batches (bf16 tolerance).

Needs a GPU (2 for PP=2) and a CUDA library built with NCCL (``GANTRY_CUDA_LIB``, as
bench/run_gpu_bench.sh builds it); skips otherwise.
"""

from __future__ import annotations

from pathlib import Path
from typing import cast

import pytest
import torch

from launcher.native.model_config import GPTConfig
from launcher.reference.gpt2_torch import TrainSettings, make_model, save_weights, train
from launcher.train.data import global_batch
from tests.gpu.gpus import need_gpus
from tests.integration.pipeline_helpers import (
    TRAIN,
    gantry_train,
    read_metrics,
    train_settings,
    write_job,
)

MODEL = {"n_layer": 4, "n_head": 4, "n_embd": 64, "vocab_size": 256, "seq_len": 64}
BATCH = 4
LOSS_TOL = 1e-2
"""Largest relative loss difference to the fp32 reference over 10 steps (bf16 compute)."""


def _reference(n_micro: int, weights: Path, settings: TrainSettings | None = None) -> list[float]:
    """Losses of the fp32 reference on the global batches of TRAIN (its settings, or
    `settings`), its initial weights written to `weights`."""
    cfg = GPTConfig(MODEL["vocab_size"], MODEL["seq_len"], MODEL["n_layer"], MODEL["n_head"],
                    MODEL["n_embd"])
    torch.manual_seed(0)
    model = make_model(cfg, seed=11, randomize_all=True)
    save_weights(model, weights)
    batches = []
    for step in range(cast(int, TRAIN["steps"])):
        inputs, targets = global_batch(step, n_micro, BATCH, cfg.max_seq_len, cfg.vocab_size,
                                       cast(int, TRAIN["seed"]))
        batches.append((torch.from_numpy(inputs.reshape(-1, cfg.max_seq_len)).long(),
                        torch.from_numpy(targets.reshape(-1, cfg.max_seq_len)).long()))
    return [loss for loss, _ in train(model, batches, settings or train_settings())]


LAYOUTS = [("1f1b", 1, 1), ("gpipe", 2, 1), ("1f1b", 2, 1), ("interleaved", 2, 2),
           ("zb-h1", 2, 1), ("zb-h2", 2, 1), ("zb-interleaved", 2, 2)]


@pytest.mark.parametrize("schedule,pp,v", LAYOUTS, ids=[f"pp{p}-{s}" for s, p, v in LAYOUTS])
def test_gpu_trajectory_matches_pytorch(tmp_path: Path, nccl_lib: Path, schedule: str, pp: int,
                                        v: int) -> None:
    need_gpus(pp)
    m = 4
    weights = tmp_path / "init.safetensors"
    expected = _reference(m, weights)
    job = write_job(tmp_path, "gpu", pp=pp, dp=1, schedule=schedule, m=m, v=v, batch=BATCH,
                    model=MODEL, train={"init_weights": str(weights)})
    result = gantry_train(job, pp, nccl_lib, run_dir=tmp_path / "run")
    assert result.returncode == 0, result.stderr[-3000:]
    records = read_metrics(tmp_path / "run")
    assert [r["step"] for r in records] == list(range(1, 11))
    assert [r["loss"] for r in records] == pytest.approx(expected, rel=LOSS_TOL)
    assert records[-1]["loss"] < records[0]["loss"]
    for rank in records[-1]["ranks"]:
        assert rank["mem_used_bytes"] > 0
        assert 0 < rank["compute_s"] < rank["total_s"]
