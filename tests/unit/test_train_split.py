"""Tests for the pipeline layer split: the calibrated cost model on the real configs, optimality
of the dynamic programme against brute force, and the job spec's stage_layers override."""

from __future__ import annotations

import itertools
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from launcher.errors import UserInputError
from launcher.job_spec import load_job
from launcher.schedules import ScheduleError
from launcher.train.split import (
    HEAD_COST_FACTOR,
    head_cost,
    head_flops,
    layer_flops,
    ranges_from_counts,
    split_layers,
)

REPO = Path(__file__).resolve().parents[2]


# --- the cost model on the two configs measured on 2x H200 ---------------------------------

def test_350m_pp2_moves_a_layer_to_the_head_stage() -> None:
    assert split_layers(24, 2, 1024, 1024, 50304) == [(0, 13), (13, 24)]


def test_1_5b_pp2_keeps_its_measured_balanced_split() -> None:
    assert split_layers(48, 2, 1600, 1024, 50304) == [(0, 25), (25, 48)]


def test_interleaved_pp2_v2_splits() -> None:
    assert split_layers(24, 4, 1024, 1024, 50304) == [(0, 6), (6, 12), (12, 19), (19, 24)]
    assert split_layers(48, 4, 1600, 1024, 50304) == [(0, 12), (12, 24), (24, 37), (37, 48)]


def test_head_is_weighted_by_the_factor(monkeypatch: pytest.MonkeyPatch) -> None:
    assert head_cost(1024, 50304) == HEAD_COST_FACTOR * head_flops(1024, 50304)
    # at its full flop weight the head gave the measured, unbalanced 14 + (10 + head)
    monkeypatch.setattr("launcher.train.split.HEAD_COST_FACTOR", 1.0)
    assert split_layers(24, 2, 1024, 1024, 50304) == [(0, 14), (14, 24)]


def test_too_many_stages_is_refused() -> None:
    with pytest.raises(ScheduleError, match="5 stages but the model has 4 layers"):
        split_layers(4, 5, 16, 8, 32)


# --- optimality against brute force ----------------------------------------------------------

def _max_cost(ranges: list[tuple[int, int]], n_embd: int, seq_len: int, vocab: int) -> float:
    layer, head = layer_flops(n_embd, seq_len), head_cost(n_embd, vocab)
    return max((end - begin) * layer + (head if i == len(ranges) - 1 else 0.0)
               for i, (begin, end) in enumerate(ranges))


def _all_splits(n_layer: int, n_stages: int) -> list[list[tuple[int, int]]]:
    splits = []
    for cuts in itertools.combinations(range(1, n_layer), n_stages - 1):
        bounds = [0, *cuts, n_layer]
        splits.append(list(itertools.pairwise(bounds)))
    return splits


@settings(max_examples=200, deadline=None)
@given(n_layer=st.integers(1, 10), data=st.data(), n_embd=st.integers(1, 64),
       seq_len=st.integers(1, 64), vocab=st.integers(1, 4096))
def test_split_is_optimal_contiguous_and_non_empty(n_layer: int, data: st.DataObject,
                                                   n_embd: int, seq_len: int,
                                                   vocab: int) -> None:
    n_stages = data.draw(st.integers(1, n_layer))
    got = split_layers(n_layer, n_stages, n_embd, seq_len, vocab)
    assert len(got) == n_stages and got[0][0] == 0 and got[-1][1] == n_layer
    assert all(end - begin >= 1 for begin, end in got)
    assert all(a[1] == b[0] for a, b in itertools.pairwise(got))
    candidates = _all_splits(n_layer, n_stages)
    best = min(_max_cost(c, n_embd, seq_len, vocab) for c in candidates)
    assert _max_cost(got, n_embd, seq_len, vocab) == best
    # ties: the last stage (the head's) starts as early as any optimal split allows
    optimal = [c for c in candidates if _max_cost(c, n_embd, seq_len, vocab) == best]
    assert got[-1][0] == min(c[-1][0] for c in optimal)


def test_ranges_from_counts() -> None:
    assert ranges_from_counts([13, 11]) == [(0, 13), (13, 24)]
    assert ranges_from_counts([1, 2, 3]) == [(0, 1), (1, 3), (3, 6)]


# --- the job spec's parallelism.stage_layers -------------------------------------------------

def _job(tmp_path: Path, parallelism: dict[str, object], n_layer: int = 24) -> Path:
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump({
        "name": "split", "model": {"n_layer": n_layer, "n_head": 4, "n_embd": 64},
        "parallelism": parallelism}))
    return path


def test_stage_layers_loads(tmp_path: Path) -> None:
    job = load_job(_job(tmp_path, {"pp": 2, "stage_layers": [13, 11]}))
    assert job.parallelism.stage_layers == [13, 11]
    job = load_job(_job(tmp_path, {"pp": 2, "schedule": "interleaved", "virtual_stages": 2,
                                   "micro_batches": 2, "stage_layers": [6, 6, 7, 5]}))
    assert job.parallelism.stage_layers == [6, 6, 7, 5]
    assert load_job(_job(tmp_path, {"pp": 2})).parallelism.stage_layers is None


BAD_STAGE_LAYERS = [
    ({"pp": 2, "stage_layers": [13, 9, 2]},
     "parallelism.stage_layers: [13, 9, 2] has 3 entries but pp(2) * virtual_stages(1) = "
     "2 stages (expected one layer count per stage)"),
    ({"pp": 2, "schedule": "interleaved", "virtual_stages": 2, "micro_batches": 2,
      "stage_layers": [12, 12]},
     "parallelism.stage_layers: [12, 12] has 2 entries but pp(2) * virtual_stages(2) = "
     "4 stages (expected one layer count per stage)"),
    ({"pp": 2, "stage_layers": [24, 0]},
     "parallelism.stage_layers[1]: 0 is not allowed (expected an integer >= 1)"),
    ({"pp": 2, "stage_layers": [13, 10]},
     "parallelism.stage_layers: [13, 10] sums to 23 but model.n_layer is 24 (expected the "
     "layer counts of all stages to add up to it)"),
    ({"pp": 2, "stage_layers": ["13", 11]},
     "parallelism.stage_layers[0]: '13' is not allowed (expected an integer)"),
    ({"pp": 2, "stage_layers": [12.5, 11.5]},
     "parallelism.stage_layers[0]: 12.5 is not allowed (expected an integer)"),
    ({"pp": 2, "stage_layers": 13},
     "parallelism.stage_layers: 13 is not allowed (expected a list of an integer)"),
]


@pytest.mark.parametrize(("parallelism", "message"), BAD_STAGE_LAYERS)
def test_bad_stage_layers_names_field(tmp_path: Path, parallelism: dict[str, object],
                                      message: str) -> None:
    path = _job(tmp_path, parallelism)
    with pytest.raises(UserInputError) as info:
        load_job(path)
    assert str(info.value) == f"{path}: {message}"


@pytest.mark.parametrize("command", ["render", "submit"])
@pytest.mark.parametrize(("parallelism", "message"), [BAD_STAGE_LAYERS[0], BAD_STAGE_LAYERS[3]])
def test_bad_stage_layers_through_the_cli(tmp_path: Path, command: str,
                                          parallelism: dict[str, object], message: str) -> None:
    path = _job(tmp_path, parallelism)
    env = {**os.environ, "PYTHONPATH": str(REPO), "SLURM_CONF": str(tmp_path / "no-such.conf"),
           "GANTRY_JOBS_DIR": str(tmp_path / "jobs")}
    args = [command, str(path)] + (["--dry-run"] if command == "submit" else [])
    result = subprocess.run([sys.executable, "-m", "launcher", *args], capture_output=True,
                            text=True, cwd=tmp_path, env=env, check=False)
    assert result.returncode == 2, result.stderr
    assert result.stderr == f"error: {path}: {message}\n"
    assert result.stdout == ""
    assert not (tmp_path / "jobs").exists()
