"""launcher/train/export_weights.py on hand-made checkpoints: moments are left out and the
tied head dropped; a head that differs from wte is measured; a checkpoint without wte, a name
in two shards, a corrupt shard or a missing output directory are one-line input errors, and
nothing is left behind."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from safetensors.numpy import load_file

from launcher import job_dir
from launcher.errors import UserInputError
from launcher.train import checkpoint
from launcher.train.export_weights import export_weights


def _checkpoint(root: Path, *stages: dict[str, np.ndarray]) -> Path:
    files = dict(checkpoint.write_shard(root, 6, k, tensors, seed=1)
                 for k, tensors in enumerate(stages))
    checkpoint.write_manifest(root, 6, files, keep=1)
    return job_dir.checkpoint_step_dir(root, 6)


def _f32(*shape: int, value: float = 1.0) -> np.ndarray:
    return np.full(shape, value, dtype=np.float32)


def test_params_only_head_dropped(tmp_path: Path) -> None:
    directory = _checkpoint(
        tmp_path / "ck",
        {"transformer.wte.weight": _f32(4, 2), "exp_avg.transformer.wte.weight": _f32(4, 2),
         "transformer.h.0.ln_1.weight": _f32(2)},
        {"lm_head.weight": _f32(4, 2), "transformer.ln_f.bias": _f32(2, value=0.0),
         "exp_avg_sq.lm_head.weight": _f32(4, 2)})
    result = export_weights(directory, tmp_path / "m.safetensors")
    assert result.step == 6 and result.tensors == 3 and result.head_max_diff == 0.0
    assert sorted(load_file(str(result.out))) == [
        "transformer.h.0.ln_1.weight", "transformer.ln_f.bias", "transformer.wte.weight"]


@pytest.mark.parametrize("stages,message", [
    (({"transformer.h.0.ln_1.weight": _f32(2)},), "no stage holds 'transformer.wte.weight'"),
    (({"transformer.wte.weight": _f32(4, 2), "a": _f32(1)}, {"a": _f32(1)}),
     "tensor 'a' is also in an earlier shard"),
    (({"transformer.wte.weight": _f32(4, 2)}, {"lm_head.weight": _f32(2, 4)}),
     "'lm_head.weight' is \\[2, 4\\]"),
    (({"transformer.wte.weight": _f32(4, 2)}, {"lm_head.weight": _f32(4, 2, value=1.5)}),
     "differs from 'transformer.wte.weight' by up to 0.5"),
])
def test_bad_checkpoints_are_input_errors(tmp_path: Path, stages: tuple[dict[str, np.ndarray]],
                                          message: str) -> None:
    directory = _checkpoint(tmp_path / "ck", *stages)
    with pytest.raises(UserInputError, match=message):
        export_weights(directory, tmp_path / "m.safetensors")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ck"]


def test_corrupt_shard_and_missing_directory(tmp_path: Path) -> None:
    directory = _checkpoint(tmp_path / "ck", {"transformer.wte.weight": _f32(4, 2)})
    with pytest.raises(UserInputError, match="no such directory"):
        export_weights(directory, tmp_path / "nowhere" / "m.safetensors")
    shard = directory / "stage_000.safetensors"
    shard.write_bytes(shard.read_bytes()[:-1] + b"\x07")
    with pytest.raises(UserInputError, match="checksum mismatch"):
        export_weights(directory, tmp_path / "m.safetensors")
    assert not (tmp_path / "m.safetensors").exists()


@pytest.mark.parametrize("interrupt", [KeyboardInterrupt, OSError])
def test_an_interrupted_write_leaves_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                             interrupt: type[BaseException]) -> None:
    """Ctrl-C or a failing disk half-way through the file: no output, no temp file."""
    from launcher.train import export_weights as module

    directory = _checkpoint(tmp_path / "ck", {"transformer.wte.weight": _f32(64, 64)})

    def half_then_fail(handle: Any, tensors: Any, metadata: Any) -> str:
        handle.write(b"x" * 1000)
        raise interrupt()

    monkeypatch.setattr(module, "write_safetensors", half_then_fail)
    with pytest.raises(UserInputError if interrupt is OSError else KeyboardInterrupt):
        export_weights(directory, tmp_path / "m.safetensors")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ck"]
