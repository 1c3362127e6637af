"""GPU benchmark of gantry's native CUDA trainer, in the anchor's terms (bench/anchors/).

``--mode single``: one GPU, the whole model as one CUDA stage, one optimizer step = m
micro-batches (forward + backward each), the global gradient norm, AdamW — the same work as the
anchor's single mode (bf16 compute; gantry also keeps fp32 master weights and moments). Prints
one JSON line: tokens/s, step time, TFLOP/s per GPU with the anchor's FLOP formula, MFU against
the bf16 peak measured the anchor's way in the same process, peak device memory in use.

Run on the device (bench/run_gpu_bench.sh runs this and the anchor in one call).
"""

from __future__ import annotations

import argparse
import ctypes
import importlib.util
import json
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from launcher.native.binding import Buffer  # noqa: E402
from launcher.native.cuda_stage import CudaStage, load_cuda_library  # noqa: E402
from launcher.native.model_config import GPTConfig  # noqa: E402


def _anchor() -> Any:
    spec = importlib.util.spec_from_file_location(
        "torch_pp_baseline", REPO / "bench" / "anchors" / "torch_pp_baseline.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class _DeviceArray:
    """A zero-copy torch view of a device buffer (``__cuda_array_interface__``)."""

    def __init__(self, ptr: int, count: int) -> None:
        self.__cuda_array_interface__ = {
            "shape": (count,), "typestr": "<f4", "data": (ptr, False), "version": 3}


def init_params(stage: CudaStage, seed: int) -> None:
    import torch

    ptr = stage.lib.lib.gt_stage_buffer(stage.handle, int(Buffer.PARAMS))
    address = ctypes.cast(ptr, ctypes.c_void_p).value
    assert address is not None
    view = torch.as_tensor(_DeviceArray(address, stage.num_params), device="cuda")
    gen = torch.Generator(device="cuda").manual_seed(seed)
    view.normal_(0.0, 0.02, generator=gen)
    for info in stage.tensors:
        if info.name.endswith(("ln_1.weight", "ln_2.weight", "ln_f.weight")):
            view[info.offset : info.offset + info.numel].fill_(1.0)
        elif len(info.shape) == 1:
            view[info.offset : info.offset + info.numel].zero_()
    stage.lib.check(stage.lib.lib.gt_stage_params_updated(stage.handle))
    torch.cuda.synchronize()


def run_single(a: argparse.Namespace) -> dict[str, Any]:
    import torch

    lib = load_cuda_library(Path(a.lib) if a.lib else None)
    config = GPTConfig(vocab_size=a.vocab, max_seq_len=a.seq, n_layer=a.layers, n_head=a.heads,
                       n_embd=a.d)
    stage = CudaStage(lib, config, 0, a.layers, is_first=True, is_last=True, batch=a.mbs,
                      seq_len=a.seq, n_slots=1)
    init_params(stage, seed=0)
    rng = np.random.default_rng(0)
    losses: list[float] = []

    def step(t: int) -> None:
        stage.zero_grad()
        total = 0.0
        for _ in range(a.nmb):
            data = rng.integers(0, a.vocab, size=(a.mbs, a.seq + 1), dtype=np.int32)
            tokens, targets = np.ascontiguousarray(data[:, :-1]), np.ascontiguousarray(data[:, 1:])
            total += stage.forward(0, tokens=tokens, targets=targets)
            stage.backward(0, loss_scale=1.0 / a.nmb)
        norm = stage.grad_sq_sum() ** 0.5
        stage.adamw_step(1e-4, 0.9, 0.95, 1e-8, 0.1, t + 1, min(1.0, 1.0 / (norm + 1e-6)))
        losses.append(total / a.nmb)

    for t in range(a.warmup):
        step(t)
    torch.cuda.synchronize()
    start = time.perf_counter()
    for t in range(a.warmup, a.warmup + a.steps):
        step(t)
    stage.synchronize()
    dt = (time.perf_counter() - start) / a.steps
    free, total = torch.cuda.mem_get_info()
    anchor = _anchor()
    tok = a.mbs * a.nmb * a.seq / dt
    tflops = tok * anchor.flops_per_token(a) / 1e12
    peak = anchor.peak_tflops(torch.device("cuda", 0))
    info = stage.info
    stage.close()
    return dict(vars(a), impl="gantry", info=info, tokens_per_s=round(tok),
                step_ms=round(dt * 1e3, 2), tflops_per_gpu=round(tflops, 1),
                peak_bf16_tflops=round(peak, 1), mfu=round(tflops / peak, 3),
                mem_used_gib=round((total - free) / 2**30, 1),
                first_loss=round(losses[0], 4), last_loss=round(losses[-1], 4))


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--mode", default="single", choices=["single"])
    p.add_argument("--lib", help="CUDA libgantry_native.so (default: $GANTRY_NATIVE_LIB)")
    p.add_argument("--layers", type=int, default=24)
    p.add_argument("--dmodel", dest="d", type=int, default=1024)
    p.add_argument("--heads", type=int, default=16)
    p.add_argument("--seq", type=int, default=1024)
    p.add_argument("--vocab", type=int, default=50304)
    p.add_argument("--mbs", type=int, default=8)
    p.add_argument("--nmb", type=int, default=8)
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--warmup", type=int, default=3)
    a = p.parse_args()
    print(json.dumps(run_single(a)), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
