"""Checkpoints: resume reproduces the uninterrupted trajectory bit-exactly; corrupt, truncated
or mismatched checkpoints are one-line errors naming the file/tensor (exit 2)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from safetensors.numpy import load_file, save_file

from tests.integration.pipeline_helpers import gantry_train, read_metrics, write_job

pytestmark = pytest.mark.slow



@pytest.fixture(scope="module")
def interrupted(tmp_path_factory: pytest.TempPathFactory, native_lib_path: Path) -> Path:
    """pp=2 x dp=2 zb-h1: 10 straight steps in full/, and 4 + resume in part/."""
    root = tmp_path_factory.mktemp("ckpt")
    for name in ("full", "part"):
        (root / name).mkdir()
        job = write_job(root / name, "ck", pp=2, dp=2, schedule="zb-h1", m=2,
                        checkpoint={"dir": str(root / name / "ckpt"), "interval": 2, "keep": 2})
        steps = [] if name == "full" else ["--max-steps", "4"]
        result = gantry_train(job, 4, native_lib_path, *steps, run_dir=root / name / "run")
        assert result.returncode == 0, result.stderr[-3000:]
    return root


def test_resume_is_bit_exact(interrupted: Path, native_lib_path: Path) -> None:
    part = interrupted / "part"
    assert [r["step"] for r in read_metrics(part / "run")] == [1, 2, 3, 4]
    result = gantry_train(part / "ck.yaml", 4, native_lib_path, "--resume",
                          run_dir=part / "run")
    assert result.returncode == 0, result.stderr[-3000:]
    full = [(r["step"], r["loss"], r["grad_norm"]) for r in read_metrics(interrupted / "full" /
                                                                         "run")]
    resumed = [(r["step"], r["loss"], r["grad_norm"]) for r in read_metrics(part / "run")]
    assert resumed == full  # exact float equality, all 10 steps
    kept = sorted(p.name for p in (part / "ckpt").iterdir())
    assert kept == ["step_00000008", "step_00000010"]  # keep: 2
    manifest = json.loads((part / "ckpt" / "step_00000010" / "manifest.json").read_text())
    assert sorted(manifest["files"]) == ["stage_000.safetensors", "stage_001.safetensors"]


def _copy_ckpt(src: Path, dst: Path) -> Path:
    import shutil

    shutil.copytree(src, dst)
    return dst


def _assert_one_line_error(result: object, *needles: str) -> None:
    stderr = result.stderr  # type: ignore[attr-defined]
    assert result.returncode == 2, stderr  # type: ignore[attr-defined]
    lines = [line for line in stderr.splitlines() if line.startswith("error: ")]
    assert len(lines) == 1, stderr
    assert "Traceback" not in stderr
    for needle in needles:
        assert needle in lines[0], lines[0]


def test_corrupt_shard_is_rejected(interrupted: Path, native_lib_path: Path,
                                   tmp_path: Path) -> None:
    ckpt = _copy_ckpt(interrupted / "full" / "ckpt" / "step_00000010", tmp_path / "c")
    shard = ckpt / "stage_001.safetensors"
    data = bytearray(shard.read_bytes())
    data[-5] ^= 0xFF
    shard.write_bytes(bytes(data))
    result = gantry_train(interrupted / "full" / "ck.yaml", 4, native_lib_path,
                          "--resume-from", str(ckpt), run_dir=tmp_path / "run")
    _assert_one_line_error(result, str(shard), "checksum mismatch")


def test_truncated_shard_is_rejected(interrupted: Path, native_lib_path: Path,
                                     tmp_path: Path) -> None:
    ckpt = _copy_ckpt(interrupted / "full" / "ckpt" / "step_00000010", tmp_path / "c")
    shard = ckpt / "stage_000.safetensors"
    shard.write_bytes(shard.read_bytes()[:100])
    result = gantry_train(interrupted / "full" / "ck.yaml", 4, native_lib_path,
                          "--resume-from", str(ckpt), run_dir=tmp_path / "run")
    _assert_one_line_error(result, str(shard))


def test_wrong_tensor_name_is_rejected(interrupted: Path, native_lib_path: Path,
                                       tmp_path: Path) -> None:
    ckpt = _copy_ckpt(interrupted / "full" / "ckpt" / "step_00000010", tmp_path / "c")
    shard = ckpt / "stage_000.safetensors"
    tensors = load_file(str(shard))
    tensors["transformer.h.0.attn.c_atn.weight"] = tensors.pop(
        "transformer.h.0.attn.c_attn.weight")
    save_file(tensors, str(shard))
    manifest = json.loads((ckpt / "manifest.json").read_text())
    from launcher.train.checkpoint import sha256_of

    # checksum fine (a whole-file sha256, as older writers recorded), content wrong
    manifest["files"][shard.name] = sha256_of(shard)
    (ckpt / "manifest.json").write_text(json.dumps(manifest))
    result = gantry_train(interrupted / "full" / "ck.yaml", 4, native_lib_path,
                          "--resume-from", str(ckpt), run_dir=tmp_path / "run")
    _assert_one_line_error(result, str(shard), "c_atn")


@pytest.mark.parametrize("stage", [0, 1])
def test_auto_resume_falls_back_to_previous_complete(interrupted: Path, native_lib_path: Path,
                                                     tmp_path: Path, stage: int) -> None:
    """A truncated shard of the newest checkpoint, found by the rank that verifies it (stage 0:
    rank 0 itself; stage 1: rank 1, whose failure rank 0 reports): resume takes step 8."""
    import shutil

    root = tmp_path / "ckpt"
    shutil.copytree(interrupted / "full" / "ckpt", root)
    shard = root / "step_00000010" / f"stage_{stage:03d}.safetensors"
    shard.write_bytes(shard.read_bytes()[:-8])
    job = write_job(tmp_path, "ck", pp=2, dp=2, schedule="zb-h1", m=2,
                    checkpoint={"dir": str(root), "interval": 2, "keep": 2})
    result = gantry_train(job, 4, native_lib_path, "--resume", run_dir=tmp_path / "run")
    assert result.returncode == 0, result.stderr[-3000:]
    assert "skipping checkpoint" in result.stderr and str(shard) in result.stderr
    resumed = [(r["step"], r["loss"]) for r in read_metrics(tmp_path / "run")]
    full = [(r["step"], r["loss"]) for r in read_metrics(interrupted / "full" / "run")]
    assert resumed == full[8:]  # continued from step 8: steps 9 and 10 again, bit-exact


def test_wrong_init_weights_shape_is_rejected(tmp_path: Path, native_lib_path: Path) -> None:
    bad = tmp_path / "bad.safetensors"
    save_file({"transformer.wte.weight": np.zeros((3, 3), dtype=np.float32)}, str(bad))
    job = write_job(tmp_path, "bad", pp=2, dp=1, schedule="1f1b",
                    train={"init_weights": str(bad)})
    result = gantry_train(job, 2, native_lib_path, run_dir=tmp_path / "run")
    _assert_one_line_error(result, str(bad))
