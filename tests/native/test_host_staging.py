"""Checkpoint staging (launcher/train/host_staging.py) on the CPU build: each (stage, buffer)
gets one host array, reused by every later read and holding that read's values; pinning is a
no-op that succeeds on the CPU backend and close() undoes it; a snapshot from the staging
holds the stage's tensors; a wrong `out` array is refused before any copy."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from launcher.native.binding import Buffer, NativeLibrary, NativeStage, pin_host, read_buffer
from launcher.native.model_config import GPTConfig
from launcher.train.checkpoint import snapshot_chunk
from launcher.train.host_staging import HostStaging
from launcher.train.native_pipeline import Chunk

CONFIG = GPTConfig(vocab_size=64, max_seq_len=8, n_layer=2, n_head=2, n_embd=16)


def _chunk(lib: NativeLibrary, stage: NativeStage) -> Chunk:
    return Chunk(lib, int(stage.handle.value or 0), 0, stage.tensors, stage.num_params)


def test_one_array_per_buffer_reused_with_fresh_values(native_lib: NativeLibrary) -> None:
    with NativeStage(native_lib, CONFIG, 0, 2, is_first=True, is_last=True, batch=1,
                     seq_len=8) as stage:
        chunk = _chunk(native_lib, stage)
        staging = HostStaging()
        first = staging.read(chunk, Buffer.ADAM_M)
        np.testing.assert_array_equal(first, chunk.read(Buffer.ADAM_M))
        chunk.write(Buffer.ADAM_M, 3, np.array([1.5, -2.0], dtype=np.float32))
        again = staging.read(chunk, Buffer.ADAM_M)
        assert again is first
        assert again[3] == 1.5 and again[4] == -2.0
        other = staging.read(chunk, Buffer.ADAM_V)
        assert other is not first
        assert staging.unpinned is None
        assert staging.pinned_bytes == 2 * stage.num_params * 4
        assert staging.close() == 2 and staging.close_error is None
        assert staging.pinned_bytes == 0 and staging.close() == 0


def test_a_snapshot_from_the_staging_holds_the_stage_tensors(native_lib: NativeLibrary) -> None:
    with NativeStage(native_lib, CONFIG, 0, 2, is_first=True, is_last=True, batch=1,
                     seq_len=8) as stage:
        chunk = _chunk(native_lib, stage)
        staging = HostStaging()
        tensors = snapshot_chunk(chunk, staging)
        fresh = snapshot_chunk(chunk)
        assert sorted(tensors) == sorted(fresh)
        for name, value in fresh.items():
            np.testing.assert_array_equal(tensors[name], value)
        for info in stage.tensors:
            np.testing.assert_array_equal(tensors[info.name],
                                          stage.tensor_view(Buffer.PARAMS, info.name))
        staging.close()


def test_read_buffer_refuses_a_wrong_out_array(native_lib: NativeLibrary) -> None:
    with NativeStage(native_lib, CONFIG, 0, 2, is_first=True, is_last=True, batch=1,
                     seq_len=8) as stage:
        n = stage.num_params
        bad_arrays: list[Any] = [np.empty(n - 1, np.float32), np.empty(n, np.float64),
                                 np.empty(2 * n, np.float32)[::2]]
        for bad in bad_arrays:
            with pytest.raises(ValueError, match="contiguous float32"):
                read_buffer(native_lib, stage.handle, Buffer.PARAMS, n, bad)


def test_pinning_is_a_no_op_that_succeeds_on_the_cpu_build(native_lib: NativeLibrary) -> None:
    array = np.zeros(1000, dtype=np.float32)
    assert pin_host(native_lib, array) is None
    assert native_lib.lib.gt_api_version() == 8
