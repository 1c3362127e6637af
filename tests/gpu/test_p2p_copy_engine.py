"""Pipeline transfers on copy engines (CUDA IPC rings synchronized by stream memory operations,
native/src/p2p_ce.h) train bit for bit like NCCL's send/recv kernels at PP=2 — the same bytes
arrive in the same buffers, only the mover differs (autotuning off so both processes pick the
same kernels) — including the wrap-around edges of the interleaved schedule and a one-message
ring (the most back-pressure), and follow the fp32 PyTorch reference.

Needs 2 visible GPUs and a CUDA library built with NCCL (``GANTRY_CUDA_LIB``);
skips otherwise.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from tests.gpu.gpus import need_gpus
from tests.gpu.test_nccl_dp_overlap import SAME_KERNELS
from tests.gpu.test_nccl_pipeline import BATCH, LOSS_TOL, MODEL, _reference
from tests.integration.pipeline_helpers import gantry_train, read_metrics, write_job

EDGES = re.compile(r"pipeline transfers: (\d+) of rank 0's (\d+) edges on copy engines")


def _run(tmp_path: Path, lib: Path, name: str, schedule: str, v: int, weights: Path,
         env: dict[str, str]) -> tuple[list[dict[str, Any]], str]:
    job = write_job(tmp_path, name, pp=2, dp=1, schedule=schedule, m=4, v=v, batch=BATCH,
                    model=MODEL, train={"init_weights": str(weights)})
    result = gantry_train(job, 2, lib, run_dir=tmp_path / name, env={**SAME_KERNELS, **env})
    assert result.returncode == 0, result.stderr[-3000:]
    return read_metrics(tmp_path / name), result.stderr


CASES = [("zb-h2", 1, "4"), ("interleaved", 2, "4"), ("1f1b", 1, "1")]


@pytest.mark.parametrize("schedule,v,slots", CASES, ids=[f"{s}-ring{n}" for s, _, n in CASES])
def test_copy_engine_edges_match_nccl(tmp_path: Path, nccl_lib: Path, schedule: str, v: int,
                                      slots: str) -> None:
    need_gpus(2)
    weights = tmp_path / "init.safetensors"
    expected = _reference(4, weights)
    ce, ce_log = _run(tmp_path, nccl_lib, "ce", schedule, v, weights,
                      {"GANTRY_P2P_TRANSPORT": "ce", "GANTRY_P2P_CE_SLOTS": slots})
    nccl, nccl_log = _run(tmp_path, nccl_lib, "nccl", schedule, v, weights,
                          {"GANTRY_P2P_TRANSPORT": "nccl"})
    # pp=2: rank 0 sends and receives activations and gradients (4 edges, 2 of them the wrap)
    for log, on_copy_engines in ((ce_log, "4"), (nccl_log, "0")):
        found = EDGES.search(log)
        assert found is not None and found.groups() == (on_copy_engines, "4"), log[-2000:]
    assert [r["loss"] for r in ce] == [r["loss"] for r in nccl]
    assert [r["grad_norm"] for r in ce] == [r["grad_norm"] for r in nccl]
    assert [r["loss"] for r in ce] == pytest.approx(expected, rel=LOSS_TOL)


def test_bad_transport_is_refused(tmp_path: Path, nccl_lib: Path) -> None:
    need_gpus(2)
    weights = tmp_path / "init.safetensors"
    _reference(4, weights)
    job = write_job(tmp_path, "bad", pp=2, dp=1, schedule="1f1b", m=4, batch=BATCH,
                    model=MODEL, train={"init_weights": str(weights)})
    result = gantry_train(job, 2, nccl_lib, run_dir=tmp_path / "bad",
                          env={"GANTRY_P2P_TRANSPORT": "shm"})
    assert result.returncode != 0
    assert "GANTRY_P2P_TRANSPORT='shm' is not allowed (allowed: auto, ce, nccl)" in result.stderr
