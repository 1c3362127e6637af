"""`gantry train` under real MPI ranks agrees with the PyTorch reference, for every schedule.

One mpirun per (layout, schedule), 10 steps of a tiny GPT-2 with odd shapes (9 layers, head
size 5, 5-token sequences), AdamW + clipping + warmup/cosine. Losses must agree with the
PyTorch reference trained on the same global batches to a relative 1e-5 (fp32, different
summation orders: measured differences are ~1e-7 relative).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.integration.pipeline_helpers import (
    TRAIN,
    reference_losses,
    train_job,
    train_settings,
)

pytestmark = pytest.mark.slow



SETTINGS = train_settings()


LAYOUTS = [
    # (pp, dp, schedule, v, m)
    (1, 1, "1f1b", 1, 4),
    (2, 1, "gpipe", 1, 4),
    (2, 1, "1f1b", 1, 4),
    (2, 1, "interleaved", 2, 4),
    (2, 1, "zb-h1", 1, 4),
    (2, 1, "zb-h2", 1, 4),
    (2, 1, "zb-h2", 1, 8),
    (4, 1, "1f1b", 1, 4),
    (4, 1, "interleaved", 2, 4),
    (4, 1, "zb-h1", 1, 5),
    (4, 1, "zb-h2", 1, 8),
    (2, 2, "1f1b", 1, 2),
    (2, 2, "zb-h1", 1, 2),
]


@pytest.mark.parametrize("pp,dp,schedule,v,m", LAYOUTS,
                         ids=[f"pp{p}-dp{d}-{s}-v{v}-m{m}" for p, d, s, v, m in LAYOUTS])
def test_trajectory_matches_pytorch(tmp_path: Path, native_lib_path: Path, pp: int, dp: int,
                                    schedule: str, v: int, m: int) -> None:
    weights = tmp_path / "init.safetensors"
    expected = reference_losses(dp * m, 2, weights, SETTINGS, TRAIN["seed"])
    records = train_job(tmp_path, native_lib_path, "run", pp=pp, dp=dp, schedule=schedule, m=m,
                        v=v, train={"init_weights": str(weights)})
    got = [r["loss"] for r in records]
    assert [r["step"] for r in records] == list(range(1, 11))
    assert got == pytest.approx(expected, rel=1e-5)
    assert len(records[0]["ranks"]) == pp * dp
    trace = (tmp_path / "run" / "trace.json").read_text()
    assert '"ph": "X"' in trace and "forward s0 mb0" in trace
