"""Token shards in llm.c's layout: 256 int32 header (magic 20240520, version 1, token count,
zeros), then the tokens as little-endian uint16. Reads are checked against the file size."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import numpy.typing as npt

from launcher.atomic_write import FileSet
from launcher.errors import UserInputError
from topology.user_files import require_regular_file

SHARD_MAGIC = 20240520
SHARD_VERSION = 1
HEADER_INTS = 256
HEADER_BYTES = HEADER_INTS * 4


def write_shard(path: Path, tokens: npt.NDArray[np.uint16], files: FileSet | None = None) -> None:
    """Writes a shard atomically (launcher/atomic_write.py); into ``files``, it is put in place
    with the set's other files (a whole `gantry data` run, all or nothing)."""
    if tokens.dtype != np.uint16:
        raise ValueError(f"tokens must be uint16, got {tokens.dtype}")
    if len(tokens) > 2**31 - 1:
        raise UserInputError(f"{path}: {len(tokens)} tokens do not fit one shard")
    if files is None:
        with FileSet() as own:
            write_shard(path, tokens, own)
        return
    with files.open(path) as handle:
        handle.write(shard_header(len(tokens)))
        handle.write(tokens.astype("<u2").tobytes())


def shard_header(count: int) -> bytes:
    """The header of a shard of ``count`` tokens (at most 2**31 - 1)."""
    header = np.zeros(HEADER_INTS, dtype="<i4")
    header[0], header[1], header[2] = SHARD_MAGIC, SHARD_VERSION, count
    return header.tobytes()


def read_shard(path: Path) -> npt.NDArray[np.uint16]:
    """Reads a whole shard; a bad header or a truncated file is a UserInputError naming it."""
    require_regular_file(path, "a token shard")
    try:
        size = path.stat().st_size
        with open(path, "rb") as f:
            raw_header = f.read(HEADER_BYTES)
            if len(raw_header) < HEADER_BYTES:
                raise UserInputError(
                    f"{path}: truncated token shard: {size} bytes, shorter than the "
                    f"{HEADER_BYTES}-byte header"
                )
            header = np.frombuffer(raw_header, dtype="<i4")
            if header[0] != SHARD_MAGIC:
                raise UserInputError(
                    f"{path}: not a token shard: magic {header[0]} (expected {SHARD_MAGIC})"
                )
            if header[1] != SHARD_VERSION:
                raise UserInputError(
                    f"{path}: token shard version {header[1]} is not supported "
                    f"(expected {SHARD_VERSION})"
                )
            count = int(header[2])
            expected = HEADER_BYTES + 2 * count
            if count < 0 or size != expected:
                raise UserInputError(
                    f"{path}: truncated or oversized token shard: header says {count} tokens "
                    f"({expected} bytes) but the file has {size} bytes"
                )
            data = np.frombuffer(f.read(2 * count), dtype="<u2")
    except OSError as err:
        raise UserInputError(f"{path}: cannot read token shard: {err.strerror}") from err
    return data.astype(np.uint16)
