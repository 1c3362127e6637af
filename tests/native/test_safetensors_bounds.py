"""Hostile safetensors headers stay bounded in the native reader: many empty tensors, a header
length over the cap, more tensors than the cap and a duplicate name among many are refused with
one `error:` line naming the file, in a process whose address space is capped (a reader whose
memory grows with tensors x header size fails there instead of taking the machine), and the
duplicate check runs in linear time (the same process has a CPU-time cap far above it)."""

from __future__ import annotations

import os
import resource
import struct
import subprocess
from pathlib import Path

import numpy as np

from launcher.data.shards import write_shard
from launcher.native.model_config import GPTConfig
from launcher.reference import gpt2_torch as ref

CONFIG = GPTConfig(vocab_size=64, max_seq_len=8, n_layer=2, n_head=2, n_embd=16)
ADDRESS_SPACE_CAP = 768 * 1024 * 1024
"""RLIMIT_AS of the reader's process: a few hundred MB (the fixed reader needs a few MB)."""
CPU_SECONDS_CAP = 5
"""RLIMIT_CPU of the reader's process: the linear reader takes a fraction of a second on the
largest file here; a quadratic duplicate check takes minutes."""
MAX_HEADER_BYTES = 100 * 1024 * 1024
MAX_TENSORS = 65536
EMPTY = '{"dtype":"F32","shape":[0],"data_offsets":[0,0]}'
LONG_PREFIX = "transformer.h.0.attn.c_attn.weight." * 8
"""Names with a long common prefix make a quadratic strcmp-based duplicate check expensive."""


def _capped() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (ADDRESS_SPACE_CAP, ADDRESS_SPACE_CAP))
    resource.setrlimit(resource.RLIMIT_CPU, (CPU_SECONDS_CAP, CPU_SECONDS_CAP))


def write_header(path: Path, names: list[str]) -> Path:
    """A safetensors file of empty F32 tensors named `names` (in order, repeats kept)."""
    header = ("{" + ",".join(f'"{name}":{EMPTY}' for name in names) + "}").encode()
    path.write_bytes(struct.pack("<Q", len(header)) + header)
    return path


def load_capped(build: Path, weights: Path, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    """Loads `weights` with gantry-native-check under the address-space and CPU caps."""
    shard = tmp_path / "s.bin"
    write_shard(shard, np.arange(64, dtype=np.uint16))
    argv = [str(build / "gantry-native-check"), "--vocab", "64", "--seq", "8", "--layers", "2",
            "--heads", "2", "--embd", "16", "--batch", "1", "--tokens", "8", "--weights",
            str(weights), "--data", str(shard)]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1"}
    return subprocess.run(argv, capture_output=True, text=True, env=env, preexec_fn=_capped,
                          timeout=120, check=False)


def assert_refused(result: subprocess.CompletedProcess[str], message: str) -> None:
    assert result.returncode == 2, result
    assert result.stderr.startswith(f"error: {message}"), result.stderr
    assert result.stderr.count("\n") == 1, result.stderr


def test_a_valid_file_loads_under_the_caps(native_build_dir: Path, tmp_path: Path) -> None:
    weights = tmp_path / "w.safetensors"
    ref.save_weights(ref.make_model(CONFIG, seed=3), weights)
    result = load_capped(native_build_dir, weights, tmp_path)
    assert result.returncode == 0, result
    assert result.stdout.split()[:3] == ["step", "0", "loss"]


def test_many_empty_tensors_are_refused_in_bounded_memory(
    native_build_dir: Path, tmp_path: Path
) -> None:
    path = write_header(tmp_path / "many.safetensors", [f"t{i:05d}" for i in range(20000)])
    assert_refused(load_capped(native_build_dir, path, tmp_path),
                   f"{path}: unexpected tensor 't00000' (not a Hugging Face GPT-2 tensor name")


def test_header_length_over_the_cap_is_refused(native_build_dir: Path, tmp_path: Path) -> None:
    path = tmp_path / "huge.safetensors"
    path.write_bytes(struct.pack("<Q", MAX_HEADER_BYTES + 1) + b"{}")
    assert_refused(load_capped(native_build_dir, path, tmp_path),
                   f"{path}: not a safetensors file: header length {MAX_HEADER_BYTES + 1} is "
                   f"over {MAX_HEADER_BYTES} bytes")


def test_more_tensors_than_the_cap_are_refused(native_build_dir: Path, tmp_path: Path) -> None:
    path = write_header(tmp_path / "count.safetensors",
                        [f"t{i}" for i in range(MAX_TENSORS + 1)])
    assert_refused(load_capped(native_build_dir, path, tmp_path),
                   f"{path}: invalid safetensors header: more than {MAX_TENSORS} tensors "
                   f"(at most {MAX_TENSORS} allowed)")


def test_a_duplicate_among_many_is_named(native_build_dir: Path, tmp_path: Path) -> None:
    names = [f"{LONG_PREFIX}{i}" for i in range(MAX_TENSORS - 1)]
    twin = names[len(names) // 2]
    path = write_header(tmp_path / "dup.safetensors", [*names, twin])
    assert_refused(load_capped(native_build_dir, path, tmp_path),
                   f"{path}: invalid safetensors header: tensor '{twin}' appears twice")
