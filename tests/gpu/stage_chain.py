"""Helpers of the CUDA stage tests: a chain of stages over a model's layers, one micro-batch
through it (full or split backward), and the gradients by tensor name with the tied wte copies
summed as the executor sums them."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from launcher.native.binding import Buffer, NativeLibrary
from launcher.native.cuda_stage import CudaStage
from launcher.native.model_config import GPTConfig


def make_chain(lib: NativeLibrary, config: GPTConfig, bounds: list[tuple[int, int]],
               weights: Path, *, batch: int, seq_len: int, n_slots: int = 1) -> list[CudaStage]:
    """One stage per (begin, end) layer range, in pipeline order, loaded from ``weights``."""
    stages = []
    for k, (begin, end) in enumerate(bounds):
        stage = CudaStage(lib, config, begin, end, is_first=k == 0, is_last=k == len(bounds) - 1,
                          batch=batch, seq_len=seq_len, n_slots=n_slots)
        stage.load(weights)
        stages.append(stage)
    return stages


def run_step(stages: list[CudaStage], tokens: np.ndarray, targets: np.ndarray, *, split: bool,
             slot: int = 0, loss_scale: float = 1.0) -> float:
    """Forward through the chain, then backward (split: input then weight gradients); the loss."""
    x = None
    loss = float("nan")
    for stage in stages:
        out = stage.forward(slot, tokens=tokens, x_in=x, targets=targets)
        if stage.is_last:
            loss = float(out)
        else:
            x = out
    dx = None
    for stage in reversed(stages):
        if split:
            dx = stage.backward_input(slot, dx, loss_scale)
            stage.backward_weight(slot)
        else:
            dx = stage.backward(slot, dx, loss_scale)
    return loss


def gradients(stages: list[CudaStage]) -> dict[str, np.ndarray]:
    """Every stage's gradient buffer by tensor name; lm_head.weight added into wte."""
    grads: dict[str, np.ndarray] = {}
    for stage in stages:
        buf = stage.read(Buffer.GRADS)
        for info in stage.tensors:
            grads[info.name] = buf[info.offset : info.offset + info.numel].reshape(info.shape)
    if "lm_head.weight" in grads:  # tied: the executor sums the two copies
        grads["transformer.wte.weight"] = grads["transformer.wte.weight"] + grads.pop(
            "lm_head.weight")
    return grads
