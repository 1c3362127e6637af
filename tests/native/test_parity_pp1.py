"""Parity of one whole-model stage (pp=1) with the PyTorch reference: loss and every gradient."""

from __future__ import annotations

from pathlib import Path

import pytest

from launcher.native.binding import NativeLibrary
from launcher.native.model_config import GPTConfig
from launcher.reference import gpt2_torch as ref
from tests.native.parity_helpers import (
    TOLERANCE,
    chain_grads,
    chain_step,
    make_batch,
    make_chain,
    rel_err,
    saved_model,
    torch_batch,
)

CONFIG = GPTConfig(vocab_size=128, max_seq_len=16, n_layer=3, n_head=4, n_embd=32)


@pytest.mark.parametrize("split", [False, True], ids=["fused-backward", "split-backward"])
def test_loss_and_every_gradient_match_torch(
    native_lib: NativeLibrary, tmp_path: Path, split: bool
) -> None:
    model, weights = saved_model(CONFIG, tmp_path, seed=1, randomize_all=True)
    tokens, targets = make_batch(CONFIG, batch=2, seq_len=16, seed=2)
    ref_loss, ref_grads = ref.loss_and_grads(model, *torch_batch(tokens, targets))

    stages = make_chain(native_lib, CONFIG, [(0, 3)], batch=2, seq_len=16, weights=weights)
    loss = chain_step(stages, tokens, targets, split=split)
    grads = chain_grads(stages)

    assert abs(loss - ref_loss) <= TOLERANCE * abs(ref_loss)
    assert sorted(grads) == sorted(ref_grads)
    errors = {name: rel_err(grads[name], ref_grads[name].numpy()) for name in ref_grads}
    worst = max(errors, key=lambda n: errors[n])
    assert errors[worst] <= TOLERANCE, f"{worst}: relative error {errors[worst]:.2e}"


def test_gradients_accumulate_over_micro_batches(native_lib: NativeLibrary, tmp_path: Path) -> None:
    """Two micro-batches with loss_scale 1/2 give the gradient of the mean of both losses."""
    model, weights = saved_model(CONFIG, tmp_path, seed=3, randomize_all=True)
    batches = [make_batch(CONFIG, batch=2, seq_len=16, seed=s) for s in (4, 5)]
    model.zero_grad(set_to_none=True)
    total = sum(model(*torch_batch(t, y)) for t, y in batches) / 2
    total.backward()
    ref_grads = {n: p.grad.numpy() for n, p in model.named_parameters() if p.grad is not None}

    stages = make_chain(native_lib, CONFIG, [(0, 3)], batch=2, seq_len=16, weights=weights,
                        n_slots=2)
    stage = stages[0]
    # both forwards first (two slots in flight), then both backwards
    stage.forward(0, tokens=batches[0][0], targets=batches[0][1])
    stage.forward(1, tokens=batches[1][0], targets=batches[1][1])
    stage.backward(1, loss_scale=0.5)
    stage.backward(0, loss_scale=0.5)
    grads = chain_grads(stages)
    for name, expected in ref_grads.items():
        assert rel_err(grads[name], expected) <= TOLERANCE, name
