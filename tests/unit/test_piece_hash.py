"""launcher/train/piece_hash.py: the digest fed in any segmentation, and recomputed from a file,
equals its definition (sha256 of the pieces' sha256s); recorded digests parse in both forms
(pieces, or an older whole-file sha256) and anything else is refused; checkpoint verification
accepts both forms and names the manifest for a malformed one."""

from __future__ import annotations

import hashlib
import itertools
import json
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from launcher import job_dir
from launcher.errors import UserInputError
from launcher.train import checkpoint
from launcher.train.piece_hash import PieceHasher, file_digest, piece_bytes_of


def _definition(data: bytes, piece: int) -> str:
    tops = b"".join(hashlib.sha256(data[i : i + piece]).digest()
                    for i in range(0, len(data), piece))
    return f"sha256-pieces-{piece}:{hashlib.sha256(tops).hexdigest()}"


@settings(max_examples=150, deadline=None)
@given(st.binary(max_size=700), st.integers(1, 80), st.lists(st.integers(0, 700), max_size=6))
def test_any_segmentation_gives_the_definition(data: bytes, piece: int, cuts: list[int]) -> None:
    hasher = PieceHasher(piece)
    bounds = [0, *sorted(min(c, len(data)) for c in cuts), len(data)]
    for start, end in itertools.pairwise(bounds):
        hasher.feed(memoryview(data)[start:end])
    assert hasher.hexdigest() == _definition(data, piece)


@settings(max_examples=40, deadline=None)
@given(st.binary(max_size=3000), st.integers(1, 500))
def test_file_digest_gives_the_definition(tmp_path_factory: pytest.TempPathFactory,
                                          data: bytes, piece: int) -> None:
    path = tmp_path_factory.mktemp("f") / "x.bin"
    path.write_bytes(data)
    assert file_digest(path, piece) == _definition(data, piece)


def test_numpy_views_of_any_shape_are_hashed_as_their_bytes() -> None:
    array = np.arange(60, dtype=np.float32).reshape(3, 20)
    hasher = PieceHasher(16)
    hasher.feed(array.data)
    assert hasher.hexdigest() == _definition(array.tobytes(), 16)


def test_recorded_digests_parse_or_are_refused() -> None:
    hex64 = "ab" * 32
    assert piece_bytes_of(hex64) is None
    assert piece_bytes_of(f"sha256-pieces-4096:{hex64}") == 4096
    for bad in ("", "xyz", "AB" * 32, f"sha256-pieces-0:{hex64}", f"sha256-pieces-:{hex64}",
                "sha256-pieces-4096:abc", f"md5:{hex64}", f"sha256-pieces-04096:{hex64}",
                f"sha256-pieces-\u0664096:{hex64}", f"sha256-pieces-7:{hex64}",
                f"sha256-pieces-4096:{hex64}\n"):
        with pytest.raises(ValueError, match="not a checkpoint digest"):
            piece_bytes_of(bad)
    with pytest.raises(ValueError, match="piece_bytes 0"):
        PieceHasher(0)


def _one_shard_checkpoint(root: Path) -> tuple[Path, str]:
    tensors = {"a": np.arange(100, dtype=np.float32)}
    name, _ = checkpoint.write_shard(root, 2, 0, tensors, seed=1)
    return job_dir.checkpoint_step_dir(root, 2), name


def test_verify_accepts_both_forms_and_names_a_malformed_digest(tmp_path: Path) -> None:
    directory, name = _one_shard_checkpoint(tmp_path)
    shard = directory / name
    for recorded in (file_digest(shard), file_digest(shard, 4096), checkpoint.sha256_of(shard)):
        checkpoint.write_manifest(tmp_path, 2, {name: recorded}, keep=1)
        assert checkpoint.verify(directory, 1) == 2
    checkpoint.write_manifest(tmp_path, 2, {name: "sha256-pieces-4096:" + "0" * 64}, keep=1)
    with pytest.raises(UserInputError, match="checksum mismatch"):
        checkpoint.verify(directory, 1)
    manifest = directory / "manifest.json"
    manifest.write_text(json.dumps({"step": 2, "files": {name: "crc32:1234"}}))
    with pytest.raises(UserInputError, match=r"manifest.json: files\['stage_000.safetensors'\]"):
        checkpoint.verify(directory, 1)
