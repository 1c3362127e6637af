"""A safetensors file written tensor by tensor from the arrays themselves, hashed on the way.

`safetensors.numpy.save` first builds the whole file as one bytes object (3.1 s per GB on
the dev VM, more than the write and the fsync together) and the caller hashes that copy
again; a checkpoint shard of a 350M model is 4.3 GB. Here the header is encoded once, then
each tensor's buffer goes to the file and into the sha256 as a memoryview: no copy of the
data in Python. The file is a plain safetensors file (8-byte little-endian header length,
the JSON header padded with spaces to 8 bytes, the tensors' bytes in header order), which
`safetensors.numpy.load_file` reads.
"""

from __future__ import annotations

import hashlib
import json
import struct
import sys
from collections.abc import Mapping
from typing import Any, BinaryIO

import numpy as np
import numpy.typing as npt

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


def write_safetensors(handle: BinaryIO, tensors: Tensors, metadata: dict[str, str],
                      limit: int | None = None) -> str:
    """Writes the file to `handle`; returns its sha256 (hex). With `limit`, stops after that
    many bytes (a deliberately torn file, for the crash fault)."""
    digest = hashlib.sha256()
    header, order = _header(tensors, metadata)
    budget = sys.maxsize if limit is None else limit

    def put(view: memoryview) -> None:
        nonlocal budget
        part = view[:budget] if len(view) > budget else view
        if len(part):
            digest.update(part)
            handle.write(part)
            budget -= len(part)

    put(memoryview(header))
    for name in order:
        array = np.ascontiguousarray(tensors[name])
        if array.dtype.byteorder == ">":
            array = array.astype(array.dtype.newbyteorder("<"))
        put(array.reshape(-1).view(np.uint8).data)
    return digest.hexdigest()
