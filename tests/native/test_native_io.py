"""Weights I/O, bad input and determinism of the native library: safetensors written by C load
in PyTorch, wrong names/shapes/dtypes and truncated files name the tensor and file, failures
leave the stage untouched, misuse is reported, and runs are bit-reproducible."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.numpy import save_file as save_numpy
from safetensors.torch import load_file

from launcher.errors import UserInputError
from launcher.native.binding import Buffer, NativeError, NativeLibrary, NativeStage
from launcher.native.model_config import GPTConfig
from launcher.reference import gpt2_torch as ref
from tests.native.parity_helpers import chain_step, make_batch, make_chain, stage_bounds

CONFIG = GPTConfig(vocab_size=64, max_seq_len=8, n_layer=3, n_head=2, n_embd=16)


@pytest.fixture
def weights(tmp_path: Path) -> Path:
    path = tmp_path / "w.safetensors"
    ref.save_weights(ref.make_model(CONFIG, seed=7, randomize_all=True), path)
    return path


def full_stage(lib: NativeLibrary, config: GPTConfig = CONFIG) -> NativeStage:
    return NativeStage(lib, config, 0, config.n_layer, is_first=True, is_last=True, batch=2,
                       seq_len=8)


def state_of(path: Path) -> dict[str, np.ndarray]:
    return {k: v.numpy() for k, v in load_file(str(path)).items()}


def test_saved_params_and_grads_load_in_torch(
    native_lib: NativeLibrary, weights: Path, tmp_path: Path
) -> None:
    chain = make_chain(native_lib, CONFIG, stage_bounds(3, 2), 2, 8, weights)
    tokens, targets = make_batch(CONFIG, 2, 8, seed=1)
    chain_step(chain, tokens, targets)
    merged: dict[str, torch.Tensor] = {}
    for k, stage in enumerate(chain):
        stage.save(tmp_path / f"p{k}.safetensors", Buffer.PARAMS)
        stage.save(tmp_path / f"g{k}.safetensors", Buffer.GRADS)
        merged.update(load_file(str(tmp_path / f"p{k}.safetensors")))
        grads = load_file(str(tmp_path / f"g{k}.safetensors"))
        for name, tensor in grads.items():
            np.testing.assert_array_equal(tensor.numpy(), stage.tensor_view(Buffer.GRADS, name))
    assert "lm_head.weight" in merged  # the last stage's tied copy
    model = ref.GPT2(CONFIG)
    ref.load_weights(model, _save_merged(merged, tmp_path / "merged.safetensors"))
    original = state_of(weights)
    for name, tensor in model.state_dict().items():
        np.testing.assert_array_equal(tensor.numpy(), original[name])
    assert not (tmp_path / "p0.safetensors.tmp").exists()


def _save_merged(tensors: dict[str, torch.Tensor], path: Path) -> Path:
    from safetensors.torch import save_file

    save_file(tensors, str(path))
    return path


def test_round_trip_of_every_buffer(native_lib: NativeLibrary, tmp_path: Path) -> None:
    with full_stage(native_lib) as a, full_stage(native_lib) as b:
        rng = np.random.default_rng(0)
        for which in Buffer:
            a.buffer(which)[:] = rng.standard_normal(a.num_params).astype(np.float32)
            a.save(tmp_path / f"{which.name}.safetensors", which)
            b.load(tmp_path / f"{which.name}.safetensors", which)
            np.testing.assert_array_equal(a.buffer(which), b.buffer(which))


def test_accepts_hf_names_without_prefix_and_mask_buffers(
    native_lib: NativeLibrary, weights: Path, tmp_path: Path
) -> None:
    state = state_of(weights)
    hub = {name.removeprefix("transformer."): t for name, t in state.items()}
    hub["h.0.attn.bias"] = np.ones((1, 1, 8, 8), dtype=np.float32)
    save_numpy(hub, str(tmp_path / "hub.safetensors"))
    with full_stage(native_lib) as stage:
        stage.load(tmp_path / "hub.safetensors")
        np.testing.assert_array_equal(stage.tensor_view(Buffer.PARAMS, "transformer.wte.weight"),
                                      state["transformer.wte.weight"])


def _rewrite(weights: Path, out: Path, edit: dict[str, np.ndarray | None]) -> Path:
    state = state_of(weights)
    for name, value in edit.items():
        if value is None:
            del state[name]
        else:
            state[name] = value
    save_numpy(state, str(out))
    return out


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        ({"transformer.h.1.mlp.c_fc.bias": None},
         "missing tensor 'transformer.h.1.mlp.c_fc.bias' (shape [64])"),
        ({"transformer.h.0.ln1.weight": np.ones(16, np.float32)},
         "unexpected tensor 'transformer.h.0.ln1.weight'"),
        ({"transformer.h.3.ln_1.weight": np.ones(16, np.float32)},
         "unexpected tensor 'transformer.h.3.ln_1.weight'"),
        ({"transformer.h.2.attn.c_attn.weight": np.ones((48, 16), np.float32)},
         "tensor 'transformer.h.2.attn.c_attn.weight' has shape [48, 16] (expected [16, 48])"),
        ({"transformer.ln_f.bias": np.ones(16, np.float16)},
         "tensor 'transformer.ln_f.bias' has dtype F16 (expected F32)"),
    ],
    ids=["missing", "wrong-name", "layer-out-of-range", "wrong-shape", "wrong-dtype"],
)
def test_bad_weights_name_file_and_tensor(
    native_lib: NativeLibrary, weights: Path, tmp_path: Path,
    edit: dict[str, np.ndarray | None], message: str,
) -> None:
    bad = _rewrite(weights, tmp_path / "bad.safetensors", edit)
    with full_stage(native_lib) as stage:
        stage.buffer(Buffer.PARAMS)[:] = 3.0
        with pytest.raises(UserInputError) as err:
            stage.load(bad)
        assert str(err.value).startswith(f"{bad}: ")
        assert message in str(err.value)
        assert np.all(stage.buffer(Buffer.PARAMS) == 3.0)  # nothing half-loaded


def test_truncated_file_names_the_cut_tensor(
    native_lib: NativeLibrary, weights: Path, tmp_path: Path
) -> None:
    data = weights.read_bytes()
    (header_len,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8 : 8 + header_len])
    last = max((k for k in header if k != "__metadata__"),
               key=lambda k: header[k]["data_offsets"][1])
    cut = tmp_path / "cut.safetensors"
    cut.write_bytes(data[:-10])
    with full_stage(native_lib) as stage, pytest.raises(UserInputError) as err:
        stage.load(cut)
    assert f"{cut}: truncated file: tensor '{last}'" in str(err.value)
    tiny = tmp_path / "tiny.safetensors"
    tiny.write_bytes(data[:5])
    with full_stage(native_lib) as stage, pytest.raises(UserInputError, match="truncated file"):
        stage.load(tiny)


@pytest.mark.parametrize(
    "header",
    [b'{"a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]', b"[1, 2]",
     b'{"a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4], "x": 1}}',
     b'{"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 4]}}'],
    ids=["unterminated", "not-an-object", "unknown-key", "size-mismatch"],
)
def test_corrupt_headers_are_input_errors(
    native_lib: NativeLibrary, tmp_path: Path, header: bytes
) -> None:
    path = tmp_path / "corrupt.safetensors"
    path.write_bytes(struct.pack("<Q", len(header)) + header + b"\0" * 8)
    with full_stage(native_lib) as stage, pytest.raises(UserInputError, match=str(path)):
        stage.load(path)


def test_bad_config_and_misuse(native_lib: NativeLibrary) -> None:
    bad = GPTConfig(vocab_size=64, max_seq_len=8, n_layer=3, n_head=3, n_embd=16)
    with pytest.raises(UserInputError, match=r"n_embd \(16\) is not divisible by n_head \(3\)"):
        full_stage(native_lib, bad)
    with pytest.raises(UserInputError, match="T=9"):
        NativeStage(native_lib, CONFIG, 0, 3, is_first=True, is_last=True, batch=1, seq_len=9)
    with pytest.raises(UserInputError, match="first stage must start at layer 0"):
        NativeStage(native_lib, CONFIG, 1, 3, is_first=True, is_last=True, batch=1, seq_len=8)
    with full_stage(native_lib) as stage:
        tokens, targets = make_batch(CONFIG, 2, 8, seed=0)
        with pytest.raises(NativeError, match="slot 0 is 'free'"):
            stage.backward(0)
        bad_tokens = tokens.copy()
        bad_tokens[1, 3] = 64
        with pytest.raises(UserInputError, match=r"tokens\[11\] = 64 is out of the vocabulary"):
            stage.forward(0, tokens=bad_tokens, targets=targets)
        stage.forward(0, tokens=tokens, targets=targets)
        with pytest.raises(NativeError, match="slot 0 is 'forward done'"):
            stage.forward(0, tokens=tokens, targets=targets)
        with pytest.raises(NativeError, match="slot 0 is 'forward done', expected 'input"):
            stage.backward_weight(0)
        with pytest.raises(UserInputError, match="slot 5 out of range"):
            stage.backward(5)


def test_runs_are_bit_reproducible(native_lib: NativeLibrary, weights: Path) -> None:
    def run() -> tuple[list[float], list[np.ndarray]]:
        chain = make_chain(native_lib, CONFIG, stage_bounds(3, 2), 2, 8, weights)
        losses = []
        for step in range(3):
            for stage in chain:
                stage.zero_grad()
            losses.append(chain_step(chain, *make_batch(CONFIG, 2, 8, seed=step)))
            for stage in chain:
                stage.adamw_step(lr=1e-2, beta1=0.9, beta2=0.95, eps=1e-8, weight_decay=0.1,
                                 step=step + 1)
        state = [stage.buffer(b).copy() for stage in chain for b in Buffer]
        for stage in chain:
            stage.close()
        return losses, state

    losses_a, state_a = run()
    losses_b, state_b = run()
    assert losses_a == losses_b
    assert losses_a[0] != losses_a[2]  # training moved
    for a, b in zip(state_a, state_b, strict=True):
        np.testing.assert_array_equal(a, b)
