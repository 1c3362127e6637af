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

from launcher.errors import UserInputError

HEADER_BYTES = 256 * 4
SHARD_MAGIC = 20240520

I32 = npt.NDArray[np.int32]


def read_shards(pattern: str) -> npt.NDArray[np.uint16]:
    """All shards matching ``pattern`` (sorted), concatenated; bad headers name the file."""
    paths = sorted(glob.glob(pattern))
    if not paths:
        raise UserInputError(f"train.data: {pattern!r} matches no token shard")
    parts = []
    for path in paths:
        raw = Path(path).read_bytes()
        if len(raw) < HEADER_BYTES:
            raise UserInputError(f"{path}: truncated token shard (no 1024-byte header)")
        header = np.frombuffer(raw[:HEADER_BYTES], dtype="<i4")
        if int(header[0]) != SHARD_MAGIC or int(header[1]) != 1:
            raise UserInputError(f"{path}: not a token shard (magic {int(header[0])})")
        count = int(header[2])
        if len(raw) != HEADER_BYTES + 2 * count:
            raise UserInputError(
                f"{path}: header says {count} tokens but the file holds "
                f"{(len(raw) - HEADER_BYTES) // 2}"
            )
        parts.append(np.frombuffer(raw[HEADER_BYTES:], dtype="<u2"))
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
