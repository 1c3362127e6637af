"""The stage's kernel switches — LayerNorm 2's backward with the bias sums of the products
around it (GANTRY_LN_BIAS_SUMS), the c_attn / c_fc bias gradients from their weight products
(GANTRY_BIAS_GEMM), the loss with its logit gradients in one pass (GANTRY_CE_FUSED) and the
residual adds in the LayerNorms after them (GANTRY_RESID_LN: the forward's activations may
differ in their last bit) — give the same gradients as the baseline kernels (every switch off),
and every one of them matches the fp32 PyTorch reference at bf16 tolerances — at a width and row
count that use several vectors per lane, partial last lanes and many blocks (the parity tests'
toy model fits in one block). The LayerNorm backward kernels that are not the library's
(native/dev/cuda) are compared with it, and with an fp64 host reference, by gantry-kernel-bench
(bench/run_gpu_bench.sh kernels)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from launcher.native.binding import NativeLibrary
from launcher.native.cuda_stage import CudaStage
from launcher.native.model_config import GPTConfig
from launcher.reference import gpt2_torch as ref
from tests.gpu.stage_chain import gradients
from tests.native.parity_helpers import chain_step, make_batch, make_chain, rel_err, torch_batch

# C = 320: 40 vectors of 8 per row, so lanes 0-7 own 2 and the rest 1; N = 4 * 256 rows.
CONFIG = GPTConfig(vocab_size=512, max_seq_len=256, n_layer=2, n_head=5, n_embd=320)
BATCH, SEQ = 4, 256
GRAD_TOL = 3e-2
"""Largest relative error against torch per gradient (bf16 activations)."""
VARIANT_TOL = 1e-4
"""Largest relative difference between two kernel variants whose bf16 outputs are the same (fp32
sums in another order)."""
BF16_VARIANT_TOL = 1e-2
"""... and between variants whose bf16 activations or logit gradients may differ in the last bit
(a flipped rounding propagates through every layer below)."""
KNOBS = ("GANTRY_LN_BIAS_SUMS", "GANTRY_BIAS_GEMM", "GANTRY_CE_FUSED", "GANTRY_RESID_LN")
BASELINE = {"GANTRY_LN_BIAS_SUMS": "0", "GANTRY_BIAS_GEMM": "0", "GANTRY_CE_FUSED": "0",
            "GANTRY_RESID_LN": "0"}
# "baseline" is the baseline configuration itself (against torch; a non-zero difference from
# the baseline would mean the kernels are not deterministic)
VARIANTS = {
    "baseline": BASELINE,
    # LayerNorm 2's backward also sums the bias gradients: fp32 sums in another order
    "ln-sums": {**BASELINE, "GANTRY_LN_BIAS_SUMS": "1"},
    # the bias gradients of c_attn / c_fc from the products: fp32 sums in another order
    "gemm": {**BASELINE, "GANTRY_BIAS_GEMM": "1"},
    # unscaled logit gradients in bf16, scaled by the head's products
    "ce": {**BASELINE, "GANTRY_CE_FUSED": "1"},
    # each projection's product rounded to bf16 before its residual add (two roundings, as
    # PyTorch's), the add in the next LayerNorm's pass; stage 0's last add is a kernel of its own
    "resid": {**BASELINE, "GANTRY_RESID_LN": "1"},
    # the defaults
    "defaults": {"GANTRY_LN_BIAS_SUMS": "1", "GANTRY_BIAS_GEMM": "1", "GANTRY_CE_FUSED": "1",
                 "GANTRY_RESID_LN": "1"},
}


@pytest.fixture
def clean_knobs() -> Iterator[None]:
    saved = {k: os.environ.get(k) for k in KNOBS}
    yield
    for key, value in saved.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value


def _gradients(lib: NativeLibrary, weights: Path, knobs: dict[str, str], tokens: np.ndarray,
               targets: np.ndarray) -> tuple[float, dict[str, np.ndarray]]:
    """Loss and gradients of one micro-batch through a 2-stage chain, split backward, with the
    kernel knobs set while the stages are created (the stage applies them then)."""
    os.environ.update(knobs)
    stages = make_chain(lib, CONFIG, [(0, 1), (1, 2)], BATCH, SEQ, weights, stage_class=CudaStage)
    loss = chain_step(stages, tokens, targets, split=True)
    return loss, gradients(stages)


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_kernel_variant_matches_baseline_and_torch(
    cuda_lib: NativeLibrary, tmp_path: Path, clean_knobs: None, variant: str,
) -> None:
    model = ref.make_model(CONFIG, seed=5, randomize_all=True)
    weights = tmp_path / "w.safetensors"
    ref.save_weights(model, weights)
    tokens, targets = make_batch(CONFIG, BATCH, SEQ, seed=6)
    ref_loss, ref_grads = ref.loss_and_grads(model, *torch_batch(tokens, targets))

    base_loss, base = _gradients(cuda_lib, weights, BASELINE, tokens, targets)
    loss, grads = _gradients(cuda_lib, weights, VARIANTS[variant], tokens, targets)

    knobs = VARIANTS[variant]
    same_forward = knobs["GANTRY_RESID_LN"] == "0"
    if same_forward:  # the forward does not depend on the backward knobs
        assert loss == base_loss
    else:
        assert abs(loss - base_loss) <= 1e-3 * abs(base_loss), (loss, base_loss)
    assert abs(loss - ref_loss) <= 5e-3 * abs(ref_loss), (loss, ref_loss)
    assert sorted(grads) == sorted(base) == sorted(ref_grads)
    diffs = {name: rel_err(grads[name], base[name]) for name in base}
    worst = max(diffs, key=lambda n: diffs[n])
    same_bf16 = knobs["GANTRY_CE_FUSED"] == "0" and same_forward
    tol = VARIANT_TOL if same_bf16 else BF16_VARIANT_TOL
    assert diffs[worst] <= tol, f"{worst}: {diffs[worst]:.2e} from the baseline kernels"
    errors = {name: rel_err(grads[name], ref_grads[name].numpy()) for name in ref_grads}
    worst = max(errors, key=lambda n: errors[n])
    assert errors[worst] <= GRAD_TOL, f"{worst}: relative error {errors[worst]:.2e} against torch"
    biases = [n for n in grads if n.endswith(("attn.c_proj.bias", "mlp.c_proj.bias",
                                              "attn.c_attn.bias", "mlp.c_fc.bias"))]
    assert len(biases) == 4 * CONFIG.n_layer and all(np.abs(grads[n]).max() > 0 for n in biases)


@pytest.mark.parametrize("fused", ["0", "1"])
@pytest.mark.parametrize("split", [False, True])
def test_zero_loss_scale_gives_zero_gradients(
    cuda_lib: NativeLibrary, tmp_path: Path, clean_knobs: None, fused: str, split: bool,
) -> None:
    """loss_scale 0 scales every gradient to 0, also where the fused cross-entropy leaves the
    scaling to the head's products (their alpha: a scale of 0 is not 'no scale')."""
    model = ref.make_model(CONFIG, seed=7, randomize_all=True)
    weights = tmp_path / "w.safetensors"
    ref.save_weights(model, weights)
    tokens, targets = make_batch(CONFIG, BATCH, SEQ, seed=8)
    os.environ["GANTRY_CE_FUSED"] = fused
    stages = make_chain(cuda_lib, CONFIG, [(0, 1), (1, 2)], BATCH, SEQ, weights,
                        stage_class=CudaStage)
    loss = chain_step(stages, tokens, targets, split=split, loss_scale=0.0)
    assert np.isfinite(loss) and loss > 0
    grads = gradients(stages)
    nonzero = [name for name, grad in grads.items() if np.any(grad != 0)]
    assert not nonzero, f"loss_scale 0 left gradients in {nonzero}"
