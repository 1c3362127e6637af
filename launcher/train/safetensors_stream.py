"""A safetensors file written tensor by tensor from the arrays themselves, hashed on the way.

`safetensors.numpy.save` first builds the whole file as one bytes object (3.1 s per GB on
the dev VM, more than the write and the fsync together) and the caller hashes that copy
again; a checkpoint shard of a 350M model is 4.3 GB. Here the header is encoded once, then
each tensor's buffer goes to the file and to the checksum as a memoryview: no copy of the
data in Python. The checksum (piece_hash.py: sha256 of fixed-size pieces, on a thread pool)
is computed beside the writes (both release the GIL), and after every ``piece_bytes``
written the kernel is asked to start writing them to disk, so the caller's fsync waits only
for the tail (docs/BENCHMARKS.md, "Checkpoint cost"). The file is a plain safetensors file (8-byte
little-endian header length, the JSON header padded with spaces to 8 bytes, the tensors'
bytes in header order), which `safetensors.numpy.load_file` reads.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import struct
import sys
from collections.abc import Mapping
from typing import Any, BinaryIO

import numpy as np
import numpy.typing as npt

from launcher.train.piece_hash import PIECE_BYTES as HASH_PIECE_BYTES
from launcher.train.piece_hash import PieceHasher

_DTYPES = {np.dtype(np.uint8): "U8", np.dtype(np.uint16): "U16", np.dtype(np.float16): "F16",
           np.dtype(np.int32): "I32", np.dtype(np.float32): "F32", np.dtype(np.int64): "I64"}
"""The numpy dtypes a shard may hold, by their safetensors names, in the order of safetensors'
dtype enumeration (its writer stores the later ones first)."""
_RANK = {dtype: rank for rank, dtype in enumerate(_DTYPES)}

Tensors = Mapping[str, npt.NDArray[Any]]


def storage_order(tensors: Tensors) -> list[str]:
    """The names in the order the file stores them, the order safetensors' own writer uses:
    by dtype, the later in its enumeration first (the wider ones, so every tensor stays
    aligned to its item size), then by name."""
    return sorted(tensors, key=lambda name: (-_RANK.get(tensors[name].dtype, -1), name))


def _header(tensors: Tensors, metadata: dict[str, str]) -> tuple[bytes, list[str]]:
    """The length prefix and JSON header, and the names in `storage_order`."""
    order = storage_order(tensors)
    entries: dict[str, object] = {"__metadata__": dict(metadata)}
    offset = 0
    for name in order:
        array = tensors[name]
        if name == "__metadata__":
            raise ValueError(f"tensor {name!r}: the name is reserved for the file's metadata")
        dtype = _DTYPES.get(array.dtype)
        if dtype is None:
            raise ValueError(f"tensor {name!r}: dtype {array.dtype} cannot be stored")
        entries[name] = {"dtype": dtype, "shape": list(array.shape),
                         "data_offsets": [offset, offset + array.nbytes]}
        offset += array.nbytes
    header = json.dumps(entries, separators=(",", ":"), ensure_ascii=False).encode()
    header += b" " * (-len(header) % 8)
    return struct.pack("<Q", len(header)) + header, order


def file_size(tensors: Tensors, metadata: dict[str, str]) -> int:
    """Bytes `write_safetensors` writes for these tensors."""
    return len(_header(tensors, metadata)[0]) + sum(a.nbytes for a in tensors.values())


PIECE_BYTES = 64 << 20
"""Bytes per write (and per writeback request): big enough to amortise the calls, small
enough that the hash thread and the disk follow close behind the writes."""


def _pieces(header: bytes, tensors: Tensors, order: list[str], limit: int | None,
            piece_bytes: int) -> list[memoryview]:
    """The file's bytes as views of the header and the tensors' own buffers, at most
    ``piece_bytes`` each, cut at ``limit``."""
    views = [memoryview(header)]
    for name in order:
        array = np.ascontiguousarray(tensors[name])
        if array.dtype.byteorder == ">":
            array = array.astype(array.dtype.newbyteorder("<"))
        views.append(array.reshape(-1).view(np.uint8).data)
    budget = sys.maxsize if limit is None else limit
    pieces: list[memoryview] = []
    for view in views:
        for start in range(0, len(view), piece_bytes):
            if budget <= 0:
                return pieces
            piece = view[start : start + min(piece_bytes, budget)]
            pieces.append(piece)
            budget -= len(piece)
    return pieces


def _start_writeback(handle: BinaryIO, length: int) -> None:
    """Asks the kernel to start writing the last ``length`` bytes written (the file's bytes
    up to its current position) to disk now (Linux:
    POSIX_FADV_DONTNEED starts the writeback of dirty pages and drops clean ones, which a
    checkpoint will not read again). Nothing where the handle has no file or the OS no fadvise."""
    advise = getattr(os, "posix_fadvise", None)
    try:
        fd = handle.fileno()
    except (AttributeError, io.UnsupportedOperation, OSError):
        return
    if advise is None:
        return
    handle.flush()
    end = handle.tell()
    with contextlib.suppress(OSError):
        advise(fd, max(0, end - length), length, os.POSIX_FADV_DONTNEED)


def write_safetensors(handle: BinaryIO, tensors: Tensors, metadata: dict[str, str],
                      limit: int | None = None, piece_bytes: int = PIECE_BYTES,
                      hash_piece_bytes: int = HASH_PIECE_BYTES) -> str:
    """Writes the file to `handle`; returns its digest (piece_hash.py, pieces of
    `hash_piece_bytes`). With `limit`, stops after that many bytes (a deliberately torn file,
    for the crash fault)."""
    header, order = _header(tensors, metadata)
    pieces = _pieces(header, tensors, order, limit, piece_bytes)
    hasher = PieceHasher(hash_piece_bytes)
    unflushed = 0
    try:
        for piece in pieces:
            hasher.feed(piece)  # hashed on the pool while the writes go on
            handle.write(piece)
            unflushed += len(piece)
            if unflushed >= piece_bytes:  # whatever tensors the last piece_bytes came from
                _start_writeback(handle, unflushed)
                unflushed = 0
    except BaseException:
        hasher.close()
        raise
    return hasher.hexdigest()
