"""AdamW overlapped with the backward (GANTRY_OPT_OVERLAP, clipping off, dp = 1): each range
the gradients-ready hook reports is updated at once, the tied wte copies of the first and last
stage after their all-reduce. Under real MPI ranks it trains bit for bit like the update after
the table (GANTRY_OPT_OVERLAP=0; AdamW is element-wise) and follows the PyTorch reference
trained without clipping; so does GANTRY_OPT_OVERLAP=2, where only pipeline rank 0 updates
early, and 3, where the other ranks update early all chunks but their last finished one. The
gradient norm of an early-updating rank is summed from its AdamW ranges (no pass of its own),
a different order of the same sum: equal to 1e-12; with GANTRY_NORM_CAPTURE=0 it has its own
pass again, the same bits as the update after the table. metrics.jsonl's per-rank
`opt_ranges` proves which path ran; with clipping on (the global norm must come first) nothing
is updated early.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest

from tests.integration.pipeline_helpers import (
    ODD_MODEL,
    TRAIN,
    gantry_train,
    reference_losses,
    train_job,
    train_settings,
    write_job,
)

pytestmark = pytest.mark.slow

STEPS = 4
NO_CLIP = dataclasses.replace(train_settings(STEPS), grad_clip=0.0)


def _run(tmp_path: Path, lib: Path, name: str, *, pp: int, schedule: str, v: int, m: int,
         weights: Path, env: dict[str, str], grad_clip: float = 0.0) -> list[dict[str, Any]]:
    return train_job(tmp_path, lib, name, pp=pp, dp=1, schedule=schedule, m=m, v=v, env=env,
                     train={"init_weights": str(weights), "steps": STEPS,
                            "grad_clip": grad_clip})


LAYOUTS = [
    # (pp, schedule, v, m)
    (1, "1f1b", 1, 2),
    (2, "1f1b", 1, 4),
    (2, "zb-h2", 1, 4),
    (2, "interleaved", 2, 4),
]


@pytest.mark.parametrize("pp,schedule,v,m", LAYOUTS,
                         ids=[f"pp{p}-{s}-v{v}-m{m}" for p, s, v, m in LAYOUTS])
def test_opt_overlap_matches_update_after_table(tmp_path: Path, native_lib_path: Path, pp: int,
                                                schedule: str, v: int, m: int) -> None:
    weights = tmp_path / "init.safetensors"
    expected = reference_losses(m, 2, weights, NO_CLIP, TRAIN["seed"])
    kw: dict[str, Any] = {"pp": pp, "schedule": schedule, "v": v, "m": m, "weights": weights}
    on = _run(tmp_path, native_lib_path, "on", env={"GANTRY_OPT_OVERLAP": "1"}, **kw)
    off = _run(tmp_path, native_lib_path, "off", env={"GANTRY_OPT_OVERLAP": "0"}, **kw)
    assert [r["loss"] for r in on] == [r["loss"] for r in off]
    assert [r["grad_norm"] for r in on] == pytest.approx([r["grad_norm"] for r in off],
                                                         rel=1e-12)
    assert [r["loss"] for r in on] == pytest.approx(expected, rel=1e-5)
    # GANTRY_NORM_CAPTURE=0: the early update with the norm's own pass, the same bits as off
    own = _run(tmp_path, native_lib_path, "own", env={"GANTRY_OPT_OVERLAP": "1",
                                                      "GANTRY_NORM_CAPTURE": "0"}, **kw)
    assert [r["loss"] for r in own] == [r["loss"] for r in off]
    assert [r["grad_norm"] for r in own] == [r["grad_norm"] for r in off]
    assert [r["ranks"][0]["opt_ranges"] for r in own] == [r["ranks"][0]["opt_ranges"] for r in on]
    assert all(rank["opt_ranges"] == 0 for r in off for rank in r["ranks"])
    per_rank = [rank["opt_ranges"] for rank in on[-1]["ranks"]]
    assert all(r["ranks"][i]["opt_ranges"] == n for r in on for i, n in enumerate(per_rank))
    # every layer once, ln_f, and the embeddings (wpe alone where wte is a tied copy: that one
    # is updated after its all-reduce; the head's wte range is never updated early)
    assert sum(per_rank) == ODD_MODEL["n_layer"] + 2
    if pp > 1:  # only pipeline rank 0 early; the others after the table, the same bits
        first = _run(tmp_path, native_lib_path, "first", env={"GANTRY_OPT_OVERLAP": "2"}, **kw)
        assert [r["loss"] for r in first] == [r["loss"] for r in off]
        assert [r["grad_norm"] for r in first] == pytest.approx(
            [r["grad_norm"] for r in off], rel=1e-12)
        assert all(r["ranks"][0]["opt_ranges"] == per_rank[0] > 0 for r in first)
        assert all(rank["opt_ranges"] == 0 for r in first for rank in r["ranks"][1:])
        # 3: rank 0 early; the others early too but for their chunk finished last (v = 1: none)
        most = _run(tmp_path, native_lib_path, "most", env={"GANTRY_OPT_OVERLAP": "3"}, **kw)
        assert [r["loss"] for r in most] == [r["loss"] for r in off]
        assert [r["grad_norm"] for r in most] == pytest.approx(
            [r["grad_norm"] for r in off], rel=1e-12)
        for r in most:
            assert r["ranks"][0]["opt_ranges"] == per_rank[0]
            for rank, early in zip(r["ranks"][1:], per_rank[1:], strict=True):
                assert (0 < rank["opt_ranges"] < early) if v > 1 else rank["opt_ranges"] == 0

def test_clipping_keeps_the_update_after_the_norm(tmp_path: Path,
                                                  native_lib_path: Path) -> None:
    weights = tmp_path / "init.safetensors"
    reference_losses(4, 2, weights, NO_CLIP, TRAIN["seed"])
    clipped = _run(tmp_path, native_lib_path, "clip", pp=2, schedule="1f1b", v=1, m=4,
                   weights=weights, env={"GANTRY_OPT_OVERLAP": "1"}, grad_clip=1.0)
    assert all(rank["opt_ranges"] == 0 for r in clipped for rank in r["ranks"])


def test_bad_switch_is_a_one_line_error(tmp_path: Path, native_lib_path: Path) -> None:
    job = write_job(tmp_path, "bad", pp=2, dp=1, schedule="1f1b", m=2, train={"steps": 1})
    result = gantry_train(job, 2, native_lib_path, run_dir=tmp_path / "run",
                          env={"GANTRY_OPT_OVERLAP": "maybe"})
    assert result.returncode == 2, result.stderr[-3000:]
    assert ("error: GANTRY_OPT_OVERLAP='maybe' is not allowed (an integer 0..3; 1 = every rank, "
            "2 = pipeline rank 0 only, 3 = rank 0 and the other ranks' chunks but the last "
            "finished, 0 = none)") in result.stderr
    assert "Traceback" not in result.stderr
