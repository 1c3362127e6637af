"""Training data of one step: synthetic tokens from the seed, or windows of uint16 shards.

The global batch of step s has dp * m micro-batches of B sequences of T + 1 tokens; replica
d trains on micro-batches d*m .. d*m+m-1. It depends only on (seed or shards, s, dp*m, B, T),
so results do not depend on the rank layout, and every rank can compute its slice alone.
"""

from __future__ import annotations

import glob
from pathlib import Path

import numpy as np
import numpy.typing as npt

from launcher.data.shards import read_shard
from launcher.errors import UserInputError

I32 = npt.NDArray[np.int32]


def read_shards(pattern: str, vocab: int) -> npt.NDArray[np.uint16]:
    """All shards matching ``pattern`` (sorted), concatenated; bad headers name the file, and
    a token outside the model's vocabulary is refused here, before any step runs (a run that
    met one mid-way would stop after hours with exit 2, never retried)."""
    paths = sorted(glob.glob(pattern))
    if not paths:
        raise UserInputError(f"train.data: {pattern!r} matches no token shard")
    parts = []
    for path in paths:
        part = read_shard(Path(path))
        if part.size and int(part.max()) >= vocab:
            raise UserInputError(
                f"{path}: token {int(part.max())} is not allowed (expected tokens below the "
                f"model's vocab_size {vocab}; `gantry data` writes 0..256, so vocab_size >= 257)")
        parts.append(part)
    return np.concatenate(parts)


def global_batch(
    step: int, n_micro: int, batch: int, seq_len: int, vocab: int, seed: int,
    tokens: npt.NDArray[np.uint16] | None = None,
) -> tuple[I32, I32]:
    """(inputs, targets) of step ``step``, each int32 (n_micro, B, T)."""
    if tokens is None:
        rng = np.random.default_rng([seed, step])
        seqs = rng.integers(0, vocab, size=(n_micro, batch, seq_len + 1), dtype=np.int64)
    else:
        span = len(tokens) - seq_len - 1
        if span < 1:
            raise UserInputError(f"train.data: {len(tokens)} tokens are fewer than seq_len + 2")
        rows = np.arange(n_micro * batch, dtype=np.int64) + step * n_micro * batch
        starts = (rows * seq_len) % span
        seqs = np.stack([tokens[s : s + seq_len + 1] for s in starts]).astype(np.int64)
        seqs = seqs.reshape(n_micro, batch, seq_len + 1)
        if int(seqs.max()) >= vocab:
            raise UserInputError(f"train.data: token {int(seqs.max())} >= vocab_size {vocab}")
    inputs = np.ascontiguousarray(seqs[:, :, :-1], dtype=np.int32)
    targets = np.ascontiguousarray(seqs[:, :, 1:], dtype=np.int32)
    return inputs, targets
