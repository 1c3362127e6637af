"""The standalone gantry-native-check executable and the C shard reader, on files made by the
Python side (`gantry data`-style shards, reference weights)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import numpy as np
import pytest
import torch

from launcher.data.shards import write_shard
from launcher.errors import UserInputError
from launcher.native.binding import NativeLibrary
from launcher.native.model_config import GPTConfig
from launcher.reference import gpt2_torch as ref

CONFIG = GPTConfig(vocab_size=257, max_seq_len=16, n_layer=4, n_head=2, n_embd=32)


def check_args(build: Path, weights: Path, shard: Path, *extra: str) -> list[str]:
    return [str(build / "gantry-native-check"), "--vocab", "257", "--seq", "16", "--layers", "4",
            "--heads", "2", "--embd", "32", "--batch", "2", "--tokens", "16",
            "--weights", str(weights), "--data", str(shard), *extra]


@pytest.mark.parametrize("stages", ["1", "3"])
def test_check_executable_loss_equals_torch(
    native_build_dir: Path, tmp_path: Path, stages: str
) -> None:
    model = ref.make_model(CONFIG, seed=9, randomize_all=True)
    weights = tmp_path / "w.safetensors"
    ref.save_weights(model, weights)
    tokens = np.frombuffer(b"the quick brown fox jumps over the lazy dog " * 3, dtype=np.uint8)
    shard = tmp_path / "train_000000.bin"
    write_shard(shard, tokens.astype(np.uint16))
    grads_out = tmp_path / "g.safetensors"
    result = subprocess.run(
        check_args(native_build_dir, weights, shard, "--stages", stages, "--grads-out",
                   str(grads_out)),
        check=True, capture_output=True, text=True,
    )
    fields = result.stdout.split()
    assert fields[:3] == ["step", "0", "loss"]
    x = torch.from_numpy(tokens[:33].astype(np.int64))
    batch_tokens, batch_targets = x[:32].view(2, 16), x[1:33].view(2, 16)
    ref_loss, _ = ref.loss_and_grads(model, batch_tokens, batch_targets)
    assert float(fields[3]) == pytest.approx(ref_loss, rel=1e-5)
    dumped = grads_out if stages == "1" else Path(f"{grads_out}.0")
    assert dumped.is_file()


def test_check_executable_bad_input_exit_2(native_build_dir: Path, tmp_path: Path) -> None:
    weights = tmp_path / "w.safetensors"
    ref.save_weights(ref.make_model(CONFIG, seed=1), weights)
    shard = tmp_path / "s.bin"
    write_shard(shard, np.arange(100, dtype=np.uint16))
    shard.write_bytes(shard.read_bytes()[:-7])
    result = subprocess.run(check_args(native_build_dir, weights, shard), capture_output=True,
                            text=True)
    assert result.returncode == 2
    assert result.stderr.startswith(f"error: {shard}: truncated token shard")


def test_c_shard_reader_reads_python_shards(native_lib: NativeLibrary, tmp_path: Path) -> None:
    tokens = np.array([5, 256, 65535, 0, 7], dtype=np.uint16)
    shard = tmp_path / "s.bin"
    write_shard(shard, tokens)
    np.testing.assert_array_equal(native_lib.read_shard(shard), tokens)
    shard.write_bytes(shard.read_bytes()[:-2])
    with pytest.raises(UserInputError, match=f"{shard}: truncated token shard"):
        native_lib.read_shard(shard)
