"""The gradients of a chain of CUDA stages by tensor name, with the tied wte copies summed as the
executor sums them (the chain itself: tests/native/parity_helpers.make_chain / chain_step with
``stage_class=CudaStage``)."""

from __future__ import annotations

import numpy as np

from launcher.native.binding import Buffer
from launcher.native.cuda_stage import CudaStage


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
