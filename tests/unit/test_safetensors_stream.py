"""launcher/train/safetensors_stream.py writes, tensor by tensor, the very bytes that
safetensors' own `save` builds in memory (so checkpoints are unchanged), the digest it returns
is that of the file (piece_hash.py's, recomputed here from its definition), and a limit tears
the file at that byte."""

from __future__ import annotations

import hashlib
import io
import itertools
import json
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from safetensors.numpy import load, save

from launcher.train.safetensors_stream import PIECE_BYTES, file_size, write_safetensors

DTYPES = [np.float32, np.float16, np.int32, np.int64, np.uint16, np.uint8]

shapes = st.lists(st.integers(0, 5), min_size=0, max_size=3).map(tuple)
names = st.text(st.characters(min_codepoint=48, max_codepoint=122), min_size=1,
                max_size=12).filter(lambda name: name != "__metadata__")


@st.composite
def tensor_dicts(draw: st.DrawFn) -> dict[str, npt.NDArray[Any]]:
    """One to six tensors of mixed dtypes and shapes (zero-size and 0-d included; safetensors'
    own writer mangles the header of a file with metadata and no tensor at all)."""
    out: dict[str, npt.NDArray[Any]] = {}
    for name in draw(st.lists(names, min_size=1, max_size=6, unique=True)):
        dtype = draw(st.sampled_from(DTYPES))
        shape = draw(shapes)
        size = int(np.prod(shape)) if shape else 1
        values = np.arange(size, dtype=np.int64) * draw(st.integers(1, 97)) % 251
        out[name] = values.astype(dtype).reshape(shape)
    return out


one_key_metadata = st.dictionaries(names, st.text(max_size=8), max_size=1)
"""safetensors' writer orders metadata keys by hash (differently from run to run), so its
bytes are comparable only with one key; with more, the header is checked by parsing it."""


def _stream(tensors: dict[str, npt.NDArray[Any]], meta: dict[str, str],
            limit: int | None = None, piece_bytes: int = PIECE_BYTES,
            hash_piece_bytes: int = 64) -> tuple[bytes, str]:
    buffer = io.BytesIO()
    digest = write_safetensors(buffer, tensors, meta, limit=limit, piece_bytes=piece_bytes,
                               hash_piece_bytes=hash_piece_bytes)
    return buffer.getvalue(), digest


def _digest(data: bytes, piece: int = 64) -> str:
    """The piecewise digest, computed here from its definition: sha256 of the pieces' sha256s."""
    tops = b"".join(hashlib.sha256(data[i : i + piece]).digest()
                    for i in range(0, len(data), piece))
    return f"sha256-pieces-{piece}:{hashlib.sha256(tops).hexdigest()}"


@settings(max_examples=200, deadline=None)
@given(tensor_dicts(), one_key_metadata)
def test_same_bytes_as_safetensors_save(tensors: dict[str, npt.NDArray[Any]],
                                        meta: dict[str, str]) -> None:
    data, digest = _stream(tensors, meta)
    assert data == save(tensors, metadata=meta)
    assert digest == _digest(data)
    assert len(data) == file_size(tensors, meta)
    back = load(data)
    assert sorted(back) == sorted(tensors)
    for name, value in tensors.items():
        assert back[name].dtype == value.dtype and np.array_equal(back[name], value)


@settings(max_examples=50, deadline=None)
@given(tensor_dicts(), st.dictionaries(names, st.text(max_size=8), min_size=2, max_size=5))
def test_every_metadata_key_is_in_the_header(tensors: dict[str, npt.NDArray[Any]],
                                             meta: dict[str, str]) -> None:
    data, _ = _stream(tensors, meta)
    length = int.from_bytes(data[:8], "little")
    assert json.loads(data[8 : 8 + length])["__metadata__"] == meta
    assert sorted(load(data)) == sorted(tensors)


def test_views_and_non_contiguous_arrays_are_written_as_their_values() -> None:
    base = np.arange(60, dtype=np.float32)
    tensors = {"slice": base[10:30].reshape(4, 5), "strided": base.reshape(6, 10)[:, ::2]}
    data, _ = _stream(tensors, {"step": "3"})
    back = load(data)
    assert np.array_equal(back["slice"], base[10:30].reshape(4, 5))
    assert np.array_equal(back["strided"], base.reshape(6, 10)[:, ::2])


def test_limit_tears_the_file_at_that_byte() -> None:
    tensors = {"a": np.ones((64, 64), dtype=np.float32), "b": np.zeros(7, dtype=np.float32)}
    whole, _ = _stream(tensors, {})
    torn, digest = _stream(tensors, {}, limit=len(whole) // 2)
    assert torn == whole[: len(whole) // 2]
    assert digest == _digest(torn)


def test_an_unsupported_dtype_names_the_tensor() -> None:
    with pytest.raises(ValueError, match=r"tensor 'c'.*complex64"):
        _stream({"c": np.zeros(2, dtype=np.complex64)}, {})


def test_the_metadata_key_is_not_a_tensor_name() -> None:
    """A tensor named like the header's metadata entry would overwrite it (hypothesis found
    the file differing from safetensors' own); it is refused instead."""
    with pytest.raises(ValueError, match="'__metadata__': the name is reserved"):
        _stream({"__metadata__": np.zeros(1, dtype=np.float32)}, {})


@settings(max_examples=100, deadline=None)
@given(tensor_dicts(), st.integers(1, 40), st.data())
def test_small_pieces_give_the_same_file_and_hash(tensors: dict[str, npt.NDArray[Any]],
                                                  piece_bytes: int, data: st.DataObject) -> None:
    """Tensors cut into pieces (hashed in the second thread as they are written) give the same
    bytes and sha256 as one piece per tensor, whole or torn at any byte."""
    whole, _ = _stream(tensors, {"step": "1"})
    limit = data.draw(st.none() | st.integers(0, len(whole)))
    hash_piece = data.draw(st.integers(1, 100))
    cut, digest = _stream(tensors, {"step": "1"}, limit=limit, piece_bytes=piece_bytes,
                          hash_piece_bytes=hash_piece)
    expected = whole if limit is None else whole[:limit]
    assert cut == expected
    assert digest == _digest(expected, hash_piece)


def test_a_file_written_in_pieces_with_writeback_reads_back(tmp_path: Path) -> None:
    """Written to a real file (where each full piece asks the kernel to start its writeback),
    the file is the one safetensors builds and loads back."""
    tensors: dict[str, npt.NDArray[Any]] = {
        "w": np.arange(3000, dtype=np.float32).reshape(30, 100),
        "b": np.arange(7, dtype=np.int64)}
    path = tmp_path / "shard.safetensors"
    with open(path, "wb") as handle:
        digest = write_safetensors(handle, tensors, {"step": "2"}, piece_bytes=4096,
                                   hash_piece_bytes=1000)
    data = path.read_bytes()
    assert data == save(tensors, metadata={"step": "2"})
    assert digest == _digest(data, 1000)


def test_writeback_is_asked_for_every_piece_bytes_whatever_the_tensor_sizes(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """No tensor here reaches piece_bytes, yet the kernel is asked to write back each run of
    piece_bytes written, as consecutive ranges from the file's start."""
    advised: list[tuple[int, int]] = []
    monkeypatch.setattr("os.posix_fadvise",
                        lambda fd, offset, length, advice: advised.append((offset, length)))
    tensors: dict[str, npt.NDArray[Any]] = {
        f"t{k}": np.full(300, k, dtype=np.float32) for k in range(10)}  # 1,200 bytes each
    path = tmp_path / "shard.safetensors"
    with open(path, "wb") as handle:
        write_safetensors(handle, tensors, {}, piece_bytes=4096)
    size = path.stat().st_size
    assert len(advised) >= 2 and advised[0][0] == 0
    for (offset, length), (next_offset, _) in itertools.pairwise(advised):
        assert next_offset == offset + length
    header = size - 10 * 1200
    assert all(4096 <= length < 4096 + max(header, 1200) for _, length in advised)
    end = advised[-1][0] + advised[-1][1]
    assert 0 <= size - end < 4096  # only the tail is left for the fsync
