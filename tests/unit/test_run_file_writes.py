"""Files a training run writes (checkpoint manifest, metrics.jsonl on resume, trace.json) go
through launcher/atomic_write: a failed write leaves the previous file and no temp file, and
is a failure of the run (GantryError, exit 1: the job may retry), never "bad input" (exit 2,
which the batch script never retries)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from launcher import job_dir
from launcher.cluster import munge
from launcher.cluster.layout import RunLayout
from launcher.cluster.munge import MungeIdentity
from launcher.errors import GantryError, UserInputError
from launcher.train import checkpoint, metrics
from tests.unit.write_faults import file_size_limit


def _run_failure(err: BaseException) -> None:
    assert isinstance(err, GantryError) and not isinstance(err, UserInputError), repr(err)
    assert "(File too large)" in str(err)


def test_a_manifest_that_cannot_be_written_is_a_run_failure(tmp_path: Path) -> None:
    directory = job_dir.checkpoint_step_dir(tmp_path, 3)
    directory.mkdir()
    files = {checkpoint.shard_name(k): "0" * 64 for k in range(200)}
    with file_size_limit(1024), pytest.raises(Exception) as info:
        checkpoint.write_manifest(tmp_path, 3, files, keep=2)
    _run_failure(info.value)
    assert os.listdir(directory) == []  # no manifest: the step stays incomplete


def test_metrics_set_aside_on_resume_keeps_the_log_when_the_write_fails(tmp_path: Path) -> None:
    lines = [json.dumps({"step": s, "loss": 1.0, "pad": "x" * 600}) for s in range(1, 5)]
    log = tmp_path / job_dir.METRICS_FILE
    log.write_text("".join(f"{line}\n" for line in lines))
    with file_size_limit(1500), pytest.raises(Exception) as info:
        metrics.set_aside_after(tmp_path, 3)
    _run_failure(info.value)
    assert log.read_text() == "".join(f"{line}\n" for line in lines)
    assert sorted(os.listdir(tmp_path)) == [job_dir.METRICS_FILE, job_dir.REPLAYED_METRICS_FILE]


def test_a_trace_that_cannot_be_written_leaves_the_previous_one(tmp_path: Path) -> None:
    trace = tmp_path / "trace.json"
    trace.write_text("{}")
    spans = [(0, 0, mb, mb * 1.0, mb + 0.5) for mb in range(50)]
    with file_size_limit(2048), pytest.raises(Exception) as info:
        metrics.write_trace(trace, metrics.trace_events(0, 0, 0.0, spans), 1)
    _run_failure(info.value)
    assert trace.read_text() == "{}" and os.listdir(tmp_path) == ["trace.json"]


def test_the_embedded_clusters_munge_key_is_written_whole_or_not_at_all(tmp_path: Path) -> None:
    """The key is made once and kept across `cluster up`s: a short one must never stay."""
    layout = RunLayout(tmp_path)
    layout.munge_dir.mkdir(parents=True)
    me = MungeIdentity(user=None, uid=os.geteuid(), gid=os.getegid())
    with file_size_limit(100), pytest.raises(UserInputError, match=r"\(File too large\)$"):
        munge.prepare(layout, me)
    assert os.listdir(layout.munge_dir) == []
    munge.prepare(layout, me)
    assert layout.munge_key.stat().st_size == munge.MUNGE_KEY_BYTES
    assert layout.munge_key.stat().st_mode & 0o777 == 0o400
