"""The model's real vocabulary, however odd (the byte tokenizer's 257, GPT-2's 50257), on the
CPU backend: loss and every gradient match PyTorch at pp 1-3, and the stage files carry exactly
`vocab_size` rows of wte under Hugging Face GPT-2 names (first stage's
``transformer.wte.weight``, the last stage's tied ``lm_head.weight``)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from safetensors.numpy import load_file

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
    stage_bounds,
    sync_tied_wte,
    torch_batch,
)

BATCH, SEQ = 2, 8


def _config(vocab: int) -> GPTConfig:
    return GPTConfig(vocab_size=vocab, max_seq_len=SEQ, n_layer=3, n_head=2, n_embd=16)


@pytest.mark.parametrize("vocab", [257, 50257])
@pytest.mark.parametrize("n_stages", [1, 2, 3])
def test_odd_vocabulary_matches_torch(native_lib: NativeLibrary, tmp_path: Path, vocab: int,
                                      n_stages: int) -> None:
    config = _config(vocab)
    model, weights = saved_model(config, tmp_path, seed=41, randomize_all=True)
    tokens, targets = make_batch(config, BATCH, SEQ, seed=42)
    targets[0, :2] = vocab - 1  # the last real class is a target and an input
    tokens[1, :2] = vocab - 1
    ref_loss, ref_grads = ref.loss_and_grads(model, *torch_batch(tokens, targets))

    chain = make_chain(native_lib, config, stage_bounds(config.n_layer, n_stages), BATCH, SEQ,
                       weights)
    loss = chain_step(chain, tokens, targets, split=n_stages > 1)
    sync_tied_wte(chain)
    grads = chain_grads(chain)

    assert abs(loss - ref_loss) <= TOLERANCE * abs(ref_loss), (loss, ref_loss)
    assert sorted(grads) == sorted(ref_grads)
    for name, expected in ref_grads.items():
        assert rel_err(grads[name], expected.numpy()) <= TOLERANCE, name


@pytest.mark.parametrize("vocab", [257, 50257])
def test_stage_files_carry_the_real_vocabulary(native_lib: NativeLibrary, tmp_path: Path,
                                               vocab: int) -> None:
    config = _config(vocab)
    model, weights = saved_model(config, tmp_path, seed=43, randomize_all=True)
    chain = make_chain(native_lib, config, stage_bounds(config.n_layer, 2), BATCH, SEQ, weights)
    files = [tmp_path / f"stage_{k}.safetensors" for k in range(2)]
    for stage, path in zip(chain, files, strict=True):
        stage.save(path)
    first, last = load_file(str(files[0])), load_file(str(files[1]))
    want = model.state_dict()["transformer.wte.weight"].numpy()
    assert first["transformer.wte.weight"].shape == (vocab, config.n_embd)
    assert last["lm_head.weight"].shape == (vocab, config.n_embd)
    np.testing.assert_array_equal(first["transformer.wte.weight"], want)
    np.testing.assert_array_equal(last["lm_head.weight"], want)
