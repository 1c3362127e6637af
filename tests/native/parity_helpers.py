"""Shared helpers of the parity tests: batches, relative errors and in-process stage chains."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar, overload

import numpy as np
import torch

from launcher.native.binding import BaseStage, Buffer, NativeLibrary, NativeStage
from launcher.native.model_config import GPTConfig
from launcher.reference import gpt2_torch as ref

TOLERANCE = 1e-5
"""Largest allowed relative error ||native - torch|| / ||torch|| per tensor."""


def rel_err(native: np.ndarray, reference: np.ndarray) -> float:
    diff = np.linalg.norm((native.astype(np.float64) - reference.astype(np.float64)).ravel())
    scale = np.linalg.norm(reference.astype(np.float64).ravel())
    return float(diff / max(float(scale), 1e-30))


def saved_model(
    config: GPTConfig, tmp_path: Path, seed: int, *, randomize_all: bool = False
) -> tuple[ref.GPT2, Path]:
    """A reference model made with ``seed``, and its weights saved as tmp_path/w.safetensors."""
    model = ref.make_model(config, seed=seed, randomize_all=randomize_all)
    weights = tmp_path / "w.safetensors"
    ref.save_weights(model, weights)
    return model, weights


def make_batch(config: GPTConfig, batch: int, seq_len: int, seed: int) -> tuple[
    np.ndarray, np.ndarray
]:
    rng = np.random.default_rng(seed)
    data = rng.integers(0, config.vocab_size, size=(batch, seq_len + 1), dtype=np.int32)
    return np.ascontiguousarray(data[:, :-1]), np.ascontiguousarray(data[:, 1:])


def stage_bounds(n_layer: int, n_stages: int) -> list[tuple[int, int]]:
    return [(k * n_layer // n_stages, (k + 1) * n_layer // n_stages) for k in range(n_stages)]


StageT = TypeVar("StageT", bound=BaseStage)


@overload
def make_chain(
    lib: NativeLibrary, config: GPTConfig, bounds: list[tuple[int, int]], batch: int,
    seq_len: int, weights: Path, n_slots: int = 1,
) -> list[NativeStage]: ...


@overload
def make_chain(
    lib: NativeLibrary, config: GPTConfig, bounds: list[tuple[int, int]], batch: int,
    seq_len: int, weights: Path, n_slots: int = 1, *, stage_class: Callable[..., StageT],
) -> list[StageT]: ...


def make_chain(
    lib: NativeLibrary, config: GPTConfig, bounds: list[tuple[int, int]], batch: int,
    seq_len: int, weights: Path, n_slots: int = 1, *,
    stage_class: Callable[..., BaseStage] = NativeStage,
) -> list[Any]:
    """One stage per (begin, end) layer range in pipeline order (host or CUDA stages),
    loaded from ``weights``."""
    stages: list[BaseStage] = []
    for k, (begin, end) in enumerate(bounds):
        stage = stage_class(lib, config, begin, end, is_first=k == 0,
                            is_last=k == len(bounds) - 1, batch=batch, seq_len=seq_len,
                            n_slots=n_slots)
        stage.load(weights)
        stages.append(stage)
    return stages


def chain_step(
    stages: Sequence[Any], tokens: np.ndarray, targets: np.ndarray, *, split: bool = False,
    slot: int = 0, loss_scale: float = 1.0,
) -> float:
    """Forward through all stages, backward in reverse (grads accumulate); returns the loss.
    Works for host stages (numpy activations) and CUDA stages (device tensors)."""
    x = None
    loss = float("nan")
    for stage in stages:
        out = stage.forward(slot, tokens=tokens, x_in=x, targets=targets)
        if stage.is_last:
            assert isinstance(out, float)
            loss = out
        else:
            assert out is not None
            x = out
    dx = None
    for stage in reversed(stages):
        if split:
            dx = stage.backward_input(slot, dx, loss_scale)
            stage.backward_weight(slot)
        else:
            dx = stage.backward(slot, dx, loss_scale)
    return loss


def sync_tied_wte(stages: list[NativeStage]) -> None:
    """Sums the first and last stage's wte gradients into both (the executor's all-reduce)."""
    if len(stages) < 2:
        return
    first, last = stages[0], stages[-1]
    r0, r1 = first.wte_range(), last.wte_range()
    assert r0 is not None and r1 is not None
    g0 = first.buffer(Buffer.GRADS)[r0[0] : r0[0] + r0[1]]
    g1 = last.buffer(Buffer.GRADS)[r1[0] : r1[0] + r1[1]]
    total = g0 + g1
    g0[:] = total
    g1[:] = total


def chain_grads(stages: list[NativeStage]) -> dict[str, np.ndarray]:
    """Every gradient by HF name (the last stage's wte copy is skipped: it equals stage 0's)."""
    grads: dict[str, np.ndarray] = {}
    for stage in stages:
        for info in stage.tensors:
            if info.name == "lm_head.weight":
                continue
            grads[info.name] = stage.tensor_view(Buffer.GRADS, info.name).copy()
    return grads


def torch_batch(tokens: np.ndarray, targets: np.ndarray) -> tuple[torch.Tensor, torch.Tensor]:
    return torch.from_numpy(tokens.astype(np.int64)), torch.from_numpy(targets.astype(np.int64))
