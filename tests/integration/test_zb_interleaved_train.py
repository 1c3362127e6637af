"""`gantry train` with the zb-interleaved schedule (v = 2 chunks per rank, split backward)
under real MPI ranks follows the PyTorch reference, at pp=2 and at pp=2 x dp=2.

Same bar as the other schedules (tests/integration/test_pipeline_train.py): 10 steps of the
odd-shaped GPT-2, losses within a relative 1e-5 of the reference trained on the same global
batches; the trace proves the table's input-gradient and weight-gradient actions ran on the
second chunk's stages. The GPU bench script runs it with two chunks (on the CPU build).
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from launcher.schedules import generate, simulate
from tests.integration.pipeline_helpers import (
    TRAIN,
    reference_losses,
    train_job,
    train_settings,
)
from tests.integration.test_bench_gantry_gpu import _bench as bench

pytestmark = pytest.mark.slow

SETTINGS = train_settings()
LAYOUTS = [(1, 4), (2, 4), (1, 3)]
"""(dp, m) at pp = 2, v = 2 (m = 3: not a multiple of pp, which zb-interleaved allows)."""


@pytest.mark.parametrize("dp,m", LAYOUTS, ids=[f"pp2-dp{d}-v2-m{m}" for d, m in LAYOUTS])
def test_zb_interleaved_matches_pytorch(tmp_path: Path, native_lib_path: Path, dp: int,
                                        m: int) -> None:
    weights = tmp_path / "init.safetensors"
    expected = reference_losses(dp * m, 2, weights, SETTINGS, TRAIN["seed"])
    records = train_job(tmp_path, native_lib_path, "run", pp=2, dp=dp, schedule="zb-interleaved",
                        m=m, v=2, train={"init_weights": str(weights)})
    assert [r["step"] for r in records] == list(range(1, TRAIN["steps"] + 1))
    assert [r["loss"] for r in records] == pytest.approx(expected, rel=1e-5)
    assert len(records[0]["ranks"]) == 2 * dp
    trace = (tmp_path / "run" / "trace.json").read_text()
    for name in ("forward s3 mb0", f"backward_input s3 mb{m - 1}", "weight s2 mb0",
                 f"weight s0 mb{m - 1}"):
        assert name in trace, name
    assert '"backward s' not in trace  # every backward is split


def test_gpu_bench_runs_it_with_two_chunks(tmp_path: Path, native_lib_path: Path) -> None:
    # bench/bench_gantry_gpu.py (CPU build, tiny model): the job gets virtual_stages 2 and the
    # timeline's theory is the v = 2 table's
    result = bench(tmp_path, native_lib_path, "--layout", "pp2", "--schedule", "zb-interleaved")
    assert (result["mode"], result["schedule"]) == ("pp2", "zb-interleaved")
    job = yaml.safe_load((tmp_path / "work" / "job.yaml").read_text())
    assert job["parallelism"]["virtual_stages"] == 2
    theory = simulate(generate("zb-interleaved", 2, 4, 2)).bubble_fraction
    assert result["timeline"]["bubble_theory_unit"] == round(theory, 4)
    assert set(result["timeline"]["op_ms"]) == {"forward", "backward_input", "weight"}
