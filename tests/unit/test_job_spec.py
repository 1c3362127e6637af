"""Tests for the job spec: loading the example, field errors and layout errors."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from launcher.errors import UserInputError
from launcher.job_spec import check_layout, load_job
from launcher.typed_config import FieldError

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "gpt2-tiny-pp2-dp2.yaml"


def test_example_loads() -> None:
    job = load_job(EXAMPLE)
    assert (job.parallelism.pp, job.parallelism.dp, job.resources.spares) == (2, 2, 1)
    check_layout(job, gpus_per_node=1)


def test_layout_error_names_every_factor() -> None:
    job = load_job(EXAMPLE)
    with pytest.raises(FieldError) as info:
        check_layout(job, gpus_per_node=2)
    assert "pp(2) * dp(2) = 4 ranks but 4 nodes x 2 GPU = 8" in str(info.value)


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        ({"name": "bad name; rm -rf"}, "name: 'bad name; rm -rf' is not allowed"),
        ({"model": {"n_embd": 64, "n_head": 5}}, "model.n_head: n_embd(64) is not divisible"),
        ({"parallelism": {"pp": 0}}, "parallelism.pp: 0 is not allowed"),
        ({"parallelism": {"schedule": "pipedream"}}, "parallelism.schedule: 'pipedream'"),
        ({"parallelism": {"virtual_stages": 2}}, "parallelism.virtual_stages: 2 needs"),
        ({"parallelism": {"schedule": "zb-interleaved"}},
         "parallelism.virtual_stages: schedule 'zb-interleaved' needs virtual_stages >= 2"),
        ({"model": {"n_layer": 2}, "parallelism": {"pp": 4}}, "4 stages but model.n_layer is 2"),
        ({"resources": {"time_limit": "soon"}}, "resources.time_limit: 'soon' is not allowed"),
        ({"resources": {"partition": ""}}, "resources.partition: '' is not allowed (expected a "
         "name, or leave it out for the default)"),
        ({"resources": {"account": ""}}, "resources.account: '' is not allowed"),
        ({"env": {"BAD-KEY": "x"}}, "env.BAD-KEY: is not a valid environment variable"),
        ({"colour": "red"}, "colour: unknown key"),
        ({"resources": {"time_limit": "10\n"}}, "resources.time_limit: '10\\n' is not allowed"),
        ({"resources": {"cpus_per_task": 0}}, "resources.cpus_per_task: 0 is not allowed"),
        ({"model": {"n_layer": 4}, "parallelism": {"pp": 2, "schedule": "interleaved",
                                                    "virtual_stages": 2, "micro_batches": 3}},
         "parallelism.micro_batches: 3 is not allowed with schedule 'interleaved' (expected a "
         "multiple of pp(2)"),
        ({"parallelism": {"micro_batches": 1000000}},
         "parallelism.micro_batches: 1000000 is not allowed (expected at most 4096"),
        ({"train": {"beta1": 2}}, "train.beta1: 2.0 is not allowed (expected in [0, 1))"),
        ({"train": {"eps": 0}}, "train.eps: 0.0 is not allowed (expected > 0)"),
        ({"train": {"weight_decay": -0.1}}, "train.weight_decay: -0.1 is not allowed"),
        ({"train": {"grad_clip": -1}}, "train.grad_clip: -1.0 is not allowed"),
        ({"train": {"warmup_steps": -1}}, "train.warmup_steps: -1 is not allowed"),
        ({"train": {"seed": -1}}, "train.seed: -1 is not allowed (expected in 0 .. 2**32 - 1)"),
        ({"checkpoint": {"dir": ""}}, "checkpoint.dir: '' is not allowed"),
        ({"policy": {"signal_lead_s": 10**20}}, "policy.signal_lead_s: 100000000000000000000 is "
         "not allowed (expected 0 .. 86400 s)"),
        ({"policy": {"straggler_threshold": 1.0}}, "policy.straggler_threshold: 1.0 is not "
         "allowed (expected a ratio above 1 and at most 100, e.g. 1.2)"),
        ({"policy": {"straggler_window_steps": 0}}, "policy.straggler_window_steps: 0 is not "
         "allowed (expected 1 .. 100000 steps)"),
        ({"policy": {"straggler_min_excess_s": -1}}, "policy.straggler_min_excess_s: -1.0 is "
         "not allowed (expected 0 .. 3600 s)"),
        ({"policy": {"straggler_action": "drain"}}, "policy.straggler_action: 'drain' is not "
         "allowed"),
    ],
)
def test_bad_job_names_field(tmp_path: Path, edit: dict[str, object], message: str) -> None:
    data = {"name": "ok", **edit}
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(UserInputError) as info:
        load_job(path)
    assert message in str(info.value)
