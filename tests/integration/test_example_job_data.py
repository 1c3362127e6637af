"""The tiny example job trains on `gantry data`'s byte-token shards: its vocabulary covers
every token the byte tokenizer writes, end-of-text included (a vocab_size of 256 was refused
before the first step: `token 256 is not allowed`)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from launcher.data.byte_tokenizer import EOT_TOKEN
from launcher.data.shards import read_shard
from tests.integration.pipeline_helpers import gantry_train, read_metrics

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "gpt2-tiny-pp2-dp2.yaml"

pytestmark = pytest.mark.slow


def test_the_example_job_trains_on_gantry_data_shards(tmp_path: Path,
                                                      native_lib_path: Path) -> None:
    data = tmp_path / "data"
    documents = [str(REPO / "README.md"), str(REPO / "docs" / "jobs.md")]
    made = subprocess.run([sys.executable, "-m", "launcher", "data", *documents, "--out",
                           str(data)], capture_output=True, text=True, check=False, cwd=REPO,
                          timeout=120)
    assert made.returncode == 0, made.stderr
    tops = [int(read_shard(shard).max()) for shard in sorted(data.glob("train_*.bin"))]
    assert max(tops) == EOT_TOKEN  # the first document's end-of-text is a training token
    job = yaml.safe_load(EXAMPLE.read_text())
    job["train"]["data"] = str(data / "train_*.bin")
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(job))
    ranks = job["parallelism"]["pp"] * job["parallelism"]["dp"]
    run_dir = tmp_path / "run"
    result = gantry_train(path, ranks, native_lib_path, "--max-steps", "2", run_dir=run_dir)
    assert result.returncode == 0, result.stderr[-3000:]
    assert [r["step"] for r in read_metrics(run_dir)] == [1, 2]
