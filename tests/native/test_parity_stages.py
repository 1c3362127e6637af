"""A chain of in-process stages equals the single-stage run and PyTorch (layers not divisible
by the number of stages, split zero-bubble backward, odd head sizes, short sequences)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from launcher.native.binding import Buffer, NativeLibrary
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
    stage_bounds,
    sync_tied_wte,
    torch_batch,
)

CONFIG = GPTConfig(vocab_size=96, max_seq_len=16, n_layer=4, n_head=4, n_embd=32)


@pytest.mark.parametrize("n_stages", [2, 3, 4])
def test_stage_chain_equals_single_stage(
    native_lib: NativeLibrary, tmp_path: Path, n_stages: int
) -> None:
    _, weights = saved_model(CONFIG, tmp_path, seed=11, randomize_all=True)
    tokens, targets = make_batch(CONFIG, batch=2, seq_len=16, seed=12)

    single = make_chain(native_lib, CONFIG, [(0, CONFIG.n_layer)], 2, 16, weights)
    single_loss = chain_step(single, tokens, targets)
    single_grads = chain_grads(single)

    bounds = stage_bounds(CONFIG.n_layer, n_stages)  # 3 stages: [0,1) [1,2) [2,4)
    chain = make_chain(native_lib, CONFIG, bounds, 2, 16, weights)
    loss = chain_step(chain, tokens, targets)
    sync_tied_wte(chain)
    grads = chain_grads(chain)

    assert loss == single_loss  # same kernels, same order: bit-identical
    assert sorted(grads) == sorted(single_grads)
    for name, expected in single_grads.items():
        assert rel_err(grads[name], expected) <= TOLERANCE, name
    # the tied copies agree after the sync
    r0, r1 = chain[0].wte_range(), chain[-1].wte_range()
    assert r0 is not None and r1 is not None
    np.testing.assert_array_equal(
        chain[0].buffer(Buffer.GRADS)[r0[0] : r0[0] + r0[1]],
        chain[-1].buffer(Buffer.GRADS)[r1[0] : r1[0] + r1[1]],
    )


def test_stage_tensor_tables_partition_the_model(native_lib: NativeLibrary, tmp_path: Path) -> None:
    model, weights = saved_model(CONFIG, tmp_path, seed=1)
    chain = make_chain(native_lib, CONFIG, stage_bounds(4, 3), 2, 16, weights)
    names = [info.name for stage in chain for info in stage.tensors]
    assert names.count("lm_head.weight") == 1
    assert chain[-1].tensors[0].name == "lm_head.weight"
    assert sorted(n for n in names if n != "lm_head.weight") == sorted(model.state_dict())
    assert chain[1].wte_range() is None
    # parameters were loaded: every tensor equals the torch weights
    state = model.state_dict()
    for stage in chain:
        for info in stage.tensors:
            source = "transformer.wte.weight" if info.name == "lm_head.weight" else info.name
            np.testing.assert_array_equal(stage.tensor_view(Buffer.PARAMS, info.name),
                                          state[source].numpy())


@pytest.mark.parametrize(
    ("config", "seq_len"),
    [
        (GPTConfig(vocab_size=70, max_seq_len=16, n_layer=3, n_head=3, n_embd=33), 16),  # hs=11
        (GPTConfig(vocab_size=64, max_seq_len=16, n_layer=3, n_head=2, n_embd=32), 5),  # T<maxT
        (GPTConfig(vocab_size=64, max_seq_len=16, n_layer=3, n_head=5, n_embd=35), 7),  # both
    ],
    ids=["odd-head-size", "short-sequence", "odd-head-short-sequence"],
)
def test_odd_shapes_match_torch_across_stages(
    native_lib: NativeLibrary, tmp_path: Path, config: GPTConfig, seq_len: int
) -> None:
    model, weights = saved_model(config, tmp_path, seed=21, randomize_all=True)
    tokens, targets = make_batch(config, batch=3, seq_len=seq_len, seed=22)
    ref_loss, ref_grads = ref.loss_and_grads(model, *torch_batch(tokens, targets))
    chain = make_chain(native_lib, config, stage_bounds(config.n_layer, 2), 3, seq_len, weights)
    loss = chain_step(chain, tokens, targets, split=True)
    sync_tied_wte(chain)
    grads = chain_grads(chain)
    assert abs(loss - ref_loss) <= TOLERANCE * abs(ref_loss)
    for name, expected in ref_grads.items():
        assert rel_err(grads[name], expected.numpy()) <= TOLERANCE, name


def test_stages_without_layers_hold_only_embedding_and_head(
    native_lib: NativeLibrary, tmp_path: Path
) -> None:
    """An embedding-only first stage and a head-only last stage still match the full model."""
    config = GPTConfig(vocab_size=64, max_seq_len=8, n_layer=2, n_head=2, n_embd=16)
    model, weights = saved_model(config, tmp_path, seed=5, randomize_all=True)
    tokens, targets = make_batch(config, batch=2, seq_len=8, seed=6)
    ref_loss, ref_grads = ref.loss_and_grads(model, *torch_batch(tokens, targets))
    chain = make_chain(native_lib, config, [(0, 0), (0, 2), (2, 2)], 2, 8, weights)
    loss = chain_step(chain, tokens, targets)
    sync_tied_wte(chain)
    grads = chain_grads(chain)
    assert abs(loss - ref_loss) <= TOLERANCE * abs(ref_loss)
    for name, expected in ref_grads.items():
        assert rel_err(grads[name], expected.numpy()) <= TOLERANCE, name
