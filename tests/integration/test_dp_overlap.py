"""The data-parallel all-reduce overlapped with the backward (GANTRY_DP_OVERLAP, bucketed by
GANTRY_DP_BUCKET_MB) trains exactly like the blocking path after the table, under real MPI
ranks, and both follow the PyTorch reference.

Each case runs `gantry train` twice on the same job: overlap on (small buckets, so several
start during the backward) and GANTRY_DP_OVERLAP=0. With two ranks per all-reduce step (dp=2,
or dp=4 as 2 emulated nodes x 2) every sum is a + b on both paths, so losses and gradient
norms must be equal bit for bit (JSON keeps a float's exact value). The per-rank bucket count
in metrics.jsonl proves the overlapped path ran (the blocking one reports 0).
"""

from __future__ import annotations

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

STEPS = 5
SETTINGS = train_settings(STEPS)
# 0.002 MB = 524 floats: a layer of ODD_MODEL (C=15) holds 2,895 parameters, so a bucket per
# layer; wte is 750, wpe 75.
SMALL_BUCKETS = "0.002"



def _run(tmp_path: Path, lib: Path, name: str, *, pp: int, dp: int, schedule: str, v: int,
         m: int, weights: Path, env: dict[str, str],
         node_names: list[str] | None = None) -> list[dict[str, Any]]:
    return train_job(tmp_path, lib, name, pp=pp, dp=dp, schedule=schedule, m=m, v=v, env=env,
                     node_names=node_names, train={"init_weights": str(weights), "steps": STEPS})


def _compare(tmp_path: Path, lib: Path, *, pp: int, dp: int, schedule: str, v: int, m: int,
             bucket_mb: str = SMALL_BUCKETS,
             node_names: list[str] | None = None) -> list[dict[str, Any]]:
    """Runs overlap on and off; asserts equal bits, the reference and who overlapped."""
    weights = tmp_path / "init.safetensors"
    expected = reference_losses(dp * m, 2, weights, SETTINGS, TRAIN["seed"])
    kw: dict[str, Any] = {"pp": pp, "dp": dp, "schedule": schedule, "v": v, "m": m,
                          "weights": weights, "node_names": node_names}
    on = _run(tmp_path, lib, "on", env={"GANTRY_DP_OVERLAP": "1",
                                        "GANTRY_DP_BUCKET_MB": bucket_mb}, **kw)
    off = _run(tmp_path, lib, "off", env={"GANTRY_DP_OVERLAP": "0"}, **kw)
    assert [r["loss"] for r in on] == [r["loss"] for r in off]
    assert [r["grad_norm"] for r in on] == [r["grad_norm"] for r in off]
    assert [r["loss"] for r in on] == pytest.approx(expected, rel=1e-5)
    for record in off:
        assert [rank["dp_buckets"] for rank in record["ranks"]] == [0] * (pp * dp)
    for record in on:
        assert all(rank["dp_buckets"] > 0 for rank in record["ranks"]), record["ranks"]
        assert all(0.0 <= rank["dp_wait_s"] <= rank["sync_s"] for rank in record["ranks"])
        # the sync phase's parts, each timed on its own, fit in it
        assert all(0.0 < rank["dp_wait_s"] + rank["tied_s"] + rank["norm_s"] <= rank["sync_s"]
                   for rank in record["ranks"])
    return on


LAYOUTS = [
    # (pp, dp, schedule, v, m)
    (1, 2, "1f1b", 1, 2),
    (2, 2, "1f1b", 1, 2),
    (2, 2, "zb-h1", 1, 2),
    (2, 2, "interleaved", 2, 4),
]


@pytest.mark.parametrize("pp,dp,schedule,v,m", LAYOUTS,
                         ids=[f"pp{p}-dp{d}-{s}-v{v}-m{m}" for p, d, s, v, m in LAYOUTS])
def test_overlap_matches_blocking_bitwise(tmp_path: Path, native_lib_path: Path, pp: int,
                                          dp: int, schedule: str, v: int, m: int) -> None:
    on = _compare(tmp_path, native_lib_path, pp=pp, dp=dp, schedule=schedule, v=v, m=m)
    # small buckets: every chunk's layers land in buckets of their own (>= 2 per rank)
    assert all(rank["dp_buckets"] >= 2 * v for rank in on[0]["ranks"])


def test_bucket_counts_follow_the_layout(tmp_path: Path, native_lib_path: Path) -> None:
    """pp=1: one stage reports ln_f, 9 layers, then wte+wpe; all adjacent in the buffer."""
    # 0 MB: every reported range is its own bucket -> ln_f, 9 layers, embeddings
    on = _compare(tmp_path, native_lib_path, pp=1, dp=2, schedule="1f1b", v=1, m=2,
                  bucket_mb="0")
    assert {rank["dp_buckets"] for r in on for rank in r["ranks"]} == {ODD_MODEL["n_layer"] + 2}
    # the default 25 MB coalesces the whole (adjacent) buffer into one bucket
    weights = tmp_path / "init.safetensors"
    big = _run(tmp_path, native_lib_path, "big", pp=1, dp=2, schedule="1f1b", v=1, m=2,
               weights=weights, env={"GANTRY_DP_OVERLAP": "1", "GANTRY_DP_BUCKET_MB": ""})
    assert {rank["dp_buckets"] for r in big for rank in r["ranks"]} == {1}
    assert [r["loss"] for r in big] == [r["loss"] for r in on]


@pytest.mark.parametrize("nodes", [["na", "na", "nb", "nb"], ["na", "nb"]],
                         ids=["dp4-2x2", "dp2-2x1"])
def test_hierarchical_nodes_match_blocking(tmp_path: Path, native_lib_path: Path,
                                           nodes: list[str]) -> None:
    """Emulated nodes. dp=4 as 2 x 2: Ireduce in the node, Iallreduce across the node
    leaders, Ibcast in the node, each step a two-rank sum, so bitwise equal again. dp=2 as
    2 x 1: the leaders' Iallreduce alone (the single-node cases above: Ireduce + Ibcast)."""
    _compare(tmp_path, native_lib_path, pp=1, dp=len(nodes), schedule="1f1b", v=1, m=1,
             node_names=nodes)


@pytest.mark.parametrize("name,value", [("GANTRY_DP_OVERLAP", "yes"),
                                        ("GANTRY_DP_BUCKET_MB", "-1")])
def test_bad_switch_is_a_one_line_error(tmp_path: Path, native_lib_path: Path, name: str,
                                        value: str) -> None:
    job = write_job(tmp_path, "bad", pp=1, dp=2, schedule="1f1b", m=2, train={"steps": 1})
    result = gantry_train(job, 2, native_lib_path, run_dir=tmp_path / "run",
                          env={name: value})
    assert result.returncode == 2, result.stderr[-3000:]
    assert f"error: {name}='{value}' is not allowed" in result.stderr
    assert "Traceback" not in result.stderr
