"""End to end: an explicit parallelism.stage_layers reaches the native pipeline of `gantry train`
(CPU library, two ranks under mpirun): the log names the ranges and each stage's checkpoint
shard holds exactly the transformer blocks of its range."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml
from safetensors.numpy import load_file

from launcher.job_dir import checkpoint_step_dir
from launcher.train.checkpoint import shard_name
from tests.integration.pipeline_helpers import ODD_MODEL, gantry_train, write_job

pytestmark = pytest.mark.slow



def _blocks(shard: Path) -> set[int]:
    return {int(m.group(1)) for name in load_file(str(shard))
            if (m := re.match(r"^transformer\.h\.(\d+)\.", name))}


def test_explicit_stage_layers_reach_the_native_pipeline(tmp_path: Path,
                                                         native_lib_path: Path) -> None:
    # the automatic split of the 9-layer model is 5 + 4; ask for 2 + 7 instead
    job = write_job(tmp_path, "split", pp=2, dp=1, schedule="1f1b", m=2,
                    train={"steps": 2, "warmup_steps": 0},
                    checkpoint={"dir": str(tmp_path / "ckpt")})
    body = yaml.safe_load(job.read_text())
    body["parallelism"]["stage_layers"] = [2, 7]
    job.write_text(yaml.safe_dump(body))
    result = gantry_train(job, 2, native_lib_path, run_dir=tmp_path / "run")
    assert result.returncode == 0, result.stderr[-3000:]
    assert "info: stage layers [(0, 2), (2, 9)]\n" in result.stdout
    step = checkpoint_step_dir(tmp_path / "ckpt", 2)
    assert _blocks(step / shard_name(0)) == {0, 1}
    assert _blocks(step / shard_name(1)) == set(range(2, ODD_MODEL["n_layer"]))
