"""Looking up a job (by id, directory or name) survives damaged job directories and refuses
impossible references with one line; a checkpoint listing survives a dangling shard link."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from launcher.errors import UserInputError
from launcher.job_dir import find_job_dir, jobs_root
from launcher.train.checkpoint_scan import scan


def _job(root: Path, dirname: str, **meta: object) -> Path:
    path = root / dirname
    path.mkdir(parents=True)
    (path / "meta.json").write_text(json.dumps({"name": "train", **meta}))
    return path


def test_a_damaged_job_directory_does_not_break_lookups_by_name(tmp_path: Path) -> None:
    _job(tmp_path, "train-a", job_id="5", created_at="abc")
    newer = _job(tmp_path, "train-b", job_id="6", created_at=1e9)
    (tmp_path / "train-c").mkdir()
    (tmp_path / "train-c" / "meta.json").write_bytes(b"\xff\xfe{")
    assert find_job_dir(tmp_path, "train").path == newer


def test_impossible_references_are_one_line(tmp_path: Path) -> None:
    with pytest.raises(UserInputError, match=r"\(300 characters\): not allowed"):
        find_job_dir(tmp_path, "x" * 300)
    loop = tmp_path / "loop"
    loop.symlink_to(loop)
    with pytest.raises(UserInputError, match=r"^--jobs-dir: .*loop cannot be resolved"):
        jobs_root(loop)


def test_a_dangling_shard_link_is_listed_not_a_traceback(tmp_path: Path) -> None:
    step = tmp_path / "step_00000004"
    step.mkdir()
    (step / "stage_000.safetensors").symlink_to(tmp_path / "gone")
    [entry] = scan(tmp_path)
    assert (entry.step, entry.complete, entry.shards, entry.bytes) == (4, False, 1, 0)
