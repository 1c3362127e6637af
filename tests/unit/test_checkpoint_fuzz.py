"""Fuzzes checkpoint directories through the real CLI, in-process: a valid two-stage checkpoint
with its manifest mutated or garbled, or a shard truncated, flipped or with a garbled header
(its recorded checksum fixed up or not, so parsing past the checksum is reached too).
`gantry checkpoints DIR --verify` exits 0 or 1 (a bad checkpoint) and `--export-weights`
exits 0, or 2 with one `error: ` line and no file left behind; never a traceback."""

from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from launcher import job_dir
from launcher.train import checkpoint
from launcher.train.piece_hash import file_digest
from tests.unit.test_input_fuzz import FUZZ, check, garbled, mutated, run_cli


def _make(root: Path) -> Path:
    table = np.arange(32, dtype=np.float32).reshape(8, 4)
    stages: list[checkpoint.Snapshot] = [
        {"transformer.wte.weight": table,
         "exp_avg.transformer.wte.weight": np.ones((8, 4), dtype=np.float32)},
        {"lm_head.weight": table.copy(), "transformer.ln_f.bias": np.zeros(4, dtype=np.float32)},
    ]
    files = dict(checkpoint.write_shard(root, 4, k, t, seed=1) for k, t in enumerate(stages))
    checkpoint.write_manifest(root, 4, files, keep=1)
    return job_dir.checkpoint_step_dir(root, 4)


@pytest.fixture(scope="module")
def pristine(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _make(tmp_path_factory.mktemp("ck")).parent


def _exercise(root: Path) -> None:
    outcome = run_cli(["checkpoints", str(root), "--verify"])
    context = f"exit {outcome.code}\n{outcome.stderr}"
    assert "Traceback" not in outcome.stdout + outcome.stderr, context
    assert outcome.code in (0, 1), context
    out = root.parent / "model.safetensors"
    exported = run_cli(["checkpoints", str(root), "--export-weights", str(out)])
    check(exported)
    leftovers = sorted(p.name for p in root.parent.iterdir() if p.name != root.name)
    assert leftovers == (["model.safetensors"] if exported.code == 0 else []), leftovers


def _manifest(directory: Path) -> dict[str, Any]:
    return dict(json.loads((directory / job_dir.CHECKPOINT_MANIFEST_FILE).read_text()))


@FUZZ
@given(data=st.data())
def test_mutated_manifest(pristine: Path, data: st.DataObject) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "ckpt"
        shutil.copytree(pristine, root)
        directory = job_dir.checkpoint_step_dir(root, 4)
        body = _manifest(directory)
        text = data.draw(st.one_of(mutated(body).map(json.dumps),
                                   garbled(json.dumps(body, indent=1))))
        (directory / job_dir.CHECKPOINT_MANIFEST_FILE).write_text(text)
        _exercise(root)


@FUZZ
@given(stage=st.integers(0, 1), op=st.sampled_from(["truncate", "flip", "header"]),
       fix_checksum=st.booleans(), data=st.data())
def test_damaged_shard(pristine: Path, stage: int, op: str, fix_checksum: bool,
                       data: st.DataObject) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "ckpt"
        shutil.copytree(pristine, root)
        directory = job_dir.checkpoint_step_dir(root, 4)
        shard = directory / checkpoint.shard_name(stage)
        raw = bytearray(shard.read_bytes())
        if op == "truncate":
            raw = raw[: data.draw(st.integers(0, len(raw) - 1))]
        elif op == "flip":
            at = data.draw(st.integers(0, len(raw) - 1))
            raw[at] ^= data.draw(st.integers(1, 255))
        else:  # a garbled JSON header, its length prefix kept or not
            length = int.from_bytes(raw[:8], "little")
            header = garbled(raw[8 : 8 + length].decode())
            new = data.draw(header).encode()
            prefix = len(new).to_bytes(8, "little") if data.draw(st.booleans()) else raw[:8]
            raw = bytearray(prefix + new + raw[8 + length :])
        shard.write_bytes(bytes(raw))
        if fix_checksum:
            body = _manifest(directory)
            body["files"][shard.name] = file_digest(shard)
            (directory / job_dir.CHECKPOINT_MANIFEST_FILE).write_text(json.dumps(body))
        _exercise(root)


def test_the_pristine_checkpoint_exports(pristine: Path, tmp_path: Path) -> None:
    """The base the fuzzers damage is itself valid: it verifies and exports."""
    root = tmp_path / "ckpt"
    shutil.copytree(pristine, root)
    assert run_cli(["checkpoints", str(root), "--verify"]).code == 0
    out = tmp_path / "m.safetensors"
    assert run_cli(["checkpoints", str(root), "--export-weights", str(out)]).code == 0
    assert out.is_file()

