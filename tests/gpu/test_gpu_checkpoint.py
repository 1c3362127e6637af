"""Checkpoints of the CUDA stages: `gantry train` stopped after 4 steps and resumed from its
checkpoint reproduces the uninterrupted 10 steps bit for bit on the GPU (the fp32 master
weights and AdamW moments come back from the device, the bf16 copies are refreshed from them,
CUDA graphs captured anew), at PP=1 on one GPU with and without clipping (without it AdamW runs
from the gradients-ready hook) and at PP=2 zb-h1 on two; a GPU shard holds the same tensors as
the CPU backend's; the checkpoint staging arrays are page-locked on the GPU build and read
the device buffers.

Needs a GPU (2 for PP=2) and a CUDA library built with NCCL (``GANTRY_CUDA_LIB``); skips
otherwise. Autotuning is off so the resumed process picks the same kernels as the first.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from safetensors.numpy import load_file

from launcher.native.binding import Buffer, NativeLibrary
from launcher.native.cuda_stage import CudaStage
from launcher.native.model_config import GPTConfig
from launcher.train.host_staging import HostStaging
from launcher.train.native_pipeline import Chunk
from tests.gpu.conftest import REPO
from tests.gpu.gpus import need_gpus
from tests.gpu.test_nccl_dp_overlap import SAME_KERNELS
from tests.gpu.test_nccl_pipeline import BATCH, MODEL, _reference
from tests.integration.pipeline_helpers import gantry_train, read_metrics, write_job
from tests.native.conftest import build_native

CASES = [(1, "1f1b", 1.0), (1, "1f1b", 0.0), (2, "zb-h1", 1.0)]


def _train(root: Path, lib: Path, pp: int, schedule: str, clip: float, weights: Path,
           *extra: str) -> list[dict[str, Any]]:
    job = write_job(root, "ck", pp=pp, dp=1, schedule=schedule, m=4, batch=BATCH, model=MODEL,
                    train={"init_weights": str(weights), "grad_clip": clip},
                    checkpoint={"dir": str(root / "ckpt"), "interval": 2, "keep": 2})
    result = gantry_train(job, pp, lib, *extra, run_dir=root / "run", env=SAME_KERNELS)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "unpinned" not in result.stderr  # the staging arrays were page-locked
    return read_metrics(root / "run")


@pytest.mark.parametrize("pp,schedule,clip", CASES,
                         ids=[f"pp{p}-{s}-clip{c:g}" for p, s, c in CASES])
def test_gpu_resume_is_bit_exact(tmp_path: Path, nccl_lib: Path, pp: int, schedule: str,
                                 clip: float) -> None:
    need_gpus(pp)
    weights = tmp_path / "init.safetensors"
    _reference(4, weights)
    full_dir, part_dir = tmp_path / "full", tmp_path / "part"
    full_dir.mkdir()
    part_dir.mkdir()
    full = _train(full_dir, nccl_lib, pp, schedule, clip, weights)
    first = _train(part_dir, nccl_lib, pp, schedule, clip, weights, "--max-steps", "4")
    assert [r["step"] for r in first] == [1, 2, 3, 4]
    resumed = _train(part_dir, nccl_lib, pp, schedule, clip, weights, "--resume")
    assert [r["step"] for r in full] == list(range(1, 11))

    def trajectory(records: list[dict[str, Any]]) -> list[tuple[int, float, float]]:
        return [(r["step"], r["loss"], r["grad_norm"]) for r in records]

    assert trajectory(resumed) == trajectory(full)  # exact float equality, all 10 steps
    assert resumed[-1]["loss"] < resumed[0]["loss"]
    for step in ("step_00000008", "step_00000010"):
        for stage in range(pp):
            name = f"stage_{stage:03d}.safetensors"
            a = load_file(str(full_dir / "ckpt" / step / name))
            b = load_file(str(part_dir / "ckpt" / step / name))
            assert sorted(a) == sorted(b)
            for key, value in a.items():
                assert value.dtype == np.float32 and np.all(np.isfinite(value)), key
                assert np.array_equal(value, b[key]), (step, name, key)


@pytest.fixture(scope="module")
def cpu_lib() -> Path:
    """The CPU build of native/ (as the integration tests build it)."""
    return build_native(REPO / "native" / "build")


def test_gpu_shard_has_the_cpu_backends_tensors(tmp_path: Path, nccl_lib: Path,
                                                cpu_lib: Path) -> None:
    """Two steps on the GPU and on the CPU backend from the same weights: the shards name the
    same float32 tensors with the same shapes, and the GPU's update of the params is the CPU's
    to bf16 training tolerance (a shard that mixed up params and moments, or held stale
    weights, would be off by the whole update)."""
    need_gpus(1)
    weights = tmp_path / "init.safetensors"
    _reference(4, weights)
    shards = {}
    for name, lib in (("gpu", nccl_lib), ("cpu", cpu_lib)):
        root = tmp_path / name
        root.mkdir()
        job = write_job(root, "ck", pp=1, dp=1, schedule="1f1b", m=4, batch=BATCH, model=MODEL,
                        train={"init_weights": str(weights), "steps": 2},
                        checkpoint={"dir": str(root / "ckpt"), "interval": 2, "keep": 1})
        result = gantry_train(job, 1, lib, run_dir=root / "run", env=SAME_KERNELS)
        assert result.returncode == 0, result.stderr[-3000:]
        shards[name] = load_file(str(root / "ckpt" / "step_00000002" / "stage_000.safetensors"))
    gpu, cpu = shards["gpu"], shards["cpu"]
    assert {k: (v.dtype, v.shape) for k, v in gpu.items()} == {
        k: (v.dtype, v.shape) for k, v in cpu.items()}
    initial = load_file(str(weights))
    params = [key for key in cpu if not key.startswith("exp_avg")]
    assert params and all(key in initial for key in params)
    update_cpu = np.concatenate([(cpu[k] - initial[k]).ravel() for k in params])
    update_gpu = np.concatenate([(gpu[k] - initial[k]).ravel() for k in params])
    assert np.linalg.norm(update_cpu) > 0
    assert np.linalg.norm(update_gpu - update_cpu) <= 0.3 * np.linalg.norm(update_cpu)


def test_staging_is_page_locked_and_reads_the_device_buffers(cuda_lib: NativeLibrary) -> None:
    config = GPTConfig(vocab_size=256, max_seq_len=64, n_layer=2, n_head=4, n_embd=64)
    stage = CudaStage(cuda_lib, config, 0, 2, is_first=True, is_last=True, batch=1, seq_len=8)
    try:
        chunk = Chunk(cuda_lib, int(stage.handle.value or 0), 0, stage.tensors,
                      stage.num_params)
        values = np.linspace(-1, 1, stage.num_params, dtype=np.float32)
        stage.write(Buffer.ADAM_V, values)
        staging = HostStaging()
        got = staging.read(chunk, Buffer.ADAM_V)
        assert staging.unpinned is None and staging.pinned_bytes == values.nbytes
        np.testing.assert_array_equal(got, values)
        stage.write(Buffer.ADAM_V, -values)
        assert staging.read(chunk, Buffer.ADAM_V) is got
        np.testing.assert_array_equal(got, -values)
        staging.close()
        assert staging.pinned_bytes == 0
    finally:
        stage.close()
