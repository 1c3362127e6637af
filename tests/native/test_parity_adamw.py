"""AdamW, clipping and the LR schedule of the native library against torch.optim.AdamW: one
step per tensor, and 10-step loss trajectories (pp=1 and a 3-stage chain)."""

from __future__ import annotations

import itertools
import math
from pathlib import Path

import numpy as np
import pytest
import torch

from launcher.errors import UserInputError
from launcher.native.binding import Buffer, LrKind, NativeError, NativeLibrary, NativeStage
from launcher.native.model_config import GPTConfig
from launcher.reference import gpt2_torch as ref
from tests.native.parity_helpers import (
    TOLERANCE,
    chain_step,
    make_batch,
    make_chain,
    rel_err,
    saved_model,
    stage_bounds,
    sync_tied_wte,
    torch_batch,
)

CONFIG = GPTConfig(vocab_size=80, max_seq_len=16, n_layer=4, n_head=2, n_embd=24)


def test_lr_schedule_matches_reference(native_lib: NativeLibrary) -> None:
    for step in range(14):
        for cosine in (False, True):
            kind = LrKind.COSINE if cosine else LrKind.CONSTANT
            got = native_lib.lr_at(kind, step, 1e-3, 1e-4, 3, 10)
            assert got == ref.lr_at(step, 1e-3, 1e-4, 3, 10, cosine=cosine)
    assert native_lib.lr_at(LrKind.COSINE, 0, 1e-3, 1e-4, 3, 10) == pytest.approx(1e-3 / 3)
    assert native_lib.lr_at(LrKind.COSINE, 10, 1e-3, 1e-4, 3, 10) == pytest.approx(1e-4)


def test_clip_coef_matches_torch(native_lib: NativeLibrary) -> None:
    assert native_lib.clip_coef(0.5, 1.0) == 1.0
    assert native_lib.clip_coef(4.0, 1.0) == pytest.approx(1.0 / (4.0 + 1e-6), rel=1e-7)


def test_adamw_step_equals_torch_per_tensor(native_lib: NativeLibrary, tmp_path: Path) -> None:
    model, weights = saved_model(CONFIG, tmp_path, seed=31, randomize_all=True)
    tokens, targets = make_batch(CONFIG, batch=2, seq_len=16, seed=32)
    settings = ref.TrainSettings(weight_decay=0.1, beta2=0.95)
    optimizer = ref.make_optimizer(model, settings)
    stage = make_chain(native_lib, CONFIG, [(0, CONFIG.n_layer)], 2, 16, weights)[0]
    grad_scale = 0.7
    for step in range(1, 4):  # three steps: bias correction changes with t
        lr = 1e-3 * step
        model.zero_grad(set_to_none=True)
        model(*torch_batch(tokens, targets)).backward()
        # the same gradients on both sides (so this checks the optimizer alone: the key part
        # of c_attn.bias has a zero true gradient, where Adam would amplify fp noise)
        for name, p in model.named_parameters():
            assert p.grad is not None
            stage.tensor_view(Buffer.GRADS, name)[...] = p.grad.numpy()
            p.grad.mul_(grad_scale)
        for group in optimizer.param_groups:
            group["lr"] = lr
        optimizer.step()

        stage.adamw_step(lr=lr, beta1=settings.beta1, beta2=settings.beta2, eps=settings.eps,
                         weight_decay=settings.weight_decay, step=step, grad_scale=grad_scale)
        for name, param in model.named_parameters():
            state = optimizer.state[param]
            for which, expected in ((Buffer.PARAMS, param), (Buffer.ADAM_M, state["exp_avg"]),
                                    (Buffer.ADAM_V, state["exp_avg_sq"])):
                got = stage.tensor_view(which, name)
                err = rel_err(got, expected.detach().numpy())
                assert err <= TOLERANCE, f"step {step} {which.name} {name}: {err:.2e}"


def test_adamw_by_ranges_equals_one_step(native_lib: NativeLibrary) -> None:
    """AdamW range by range (cuts inside tensors and on their edges, any order) gives the same
    bits as one whole-buffer step: what the executor's optimizer overlap relies on."""
    rng = np.random.default_rng(5)
    kwargs = {"lr": 3e-3, "beta1": 0.9, "beta2": 0.95, "eps": 1e-8, "weight_decay": 0.1,
              "grad_scale": 1.0}
    stages = [NativeStage(native_lib, CONFIG, 0, CONFIG.n_layer, is_first=True, is_last=True,
                          batch=1, seq_len=4) for _ in range(2)]
    whole, ranged = stages
    try:
        n = whole.buffer(Buffer.PARAMS).size
        initial = None
        for which in (Buffer.PARAMS, Buffer.GRADS, Buffer.ADAM_M, Buffer.ADAM_V):
            values = rng.standard_normal(n).astype(np.float32)
            if which is Buffer.ADAM_V:
                values = np.abs(values)
            whole.buffer(which)[:] = values
            ranged.buffer(which)[:] = values
            initial = values if which is Buffer.PARAMS else initial
        edges = [info.offset for info in whole.tensors][3:6]
        cuts = sorted({0, n, *edges, *rng.integers(1, n, size=5).tolist()})
        pieces = list(itertools.pairwise(cuts))
        for step in (1, 2):
            whole.adamw_step(step=step, **kwargs)
            ranged.norm_capture_begin()
            for begin, end in reversed(pieces):  # backward order, like the hook
                ranged.adamw_range(begin, end - begin, step=step, **kwargs)
            ranged.join_optimizer()
            # the ranges' squared gradients: the norm without a pass of its own
            assert ranged.norm_capture_end() == pytest.approx(whole.grad_sq_sum(), rel=1e-12)
            for which in (Buffer.PARAMS, Buffer.ADAM_M, Buffer.ADAM_V):
                np.testing.assert_array_equal(ranged.buffer(which), whole.buffer(which))
        assert initial is not None and not np.array_equal(whole.buffer(Buffer.PARAMS), initial)
        with pytest.raises(UserInputError, match="outside the"):
            ranged.adamw_range(n - 2, 3, step=1, **kwargs)
        with pytest.raises(NativeError, match="not capturing"):
            ranged.norm_capture_end()
        ranged.norm_capture_begin()  # only what was updated since the (re)start counts
        ranged.adamw_range(0, 5, step=3, **kwargs)
        ranged.norm_capture_begin()
        ranged.adamw_range(5, 7, step=3, **kwargs)
        grads = ranged.buffer(Buffer.GRADS).astype(np.float64)
        assert ranged.norm_capture_end() == pytest.approx(float(np.sum(grads[5:12] ** 2)),
                                                          rel=1e-12)
    finally:
        for stage in stages:
            stage.close()


def test_start_accumulation_reads_as_zeroed(native_lib: NativeLibrary) -> None:
    """The CPU backend's restart is a plain zeroing (the CUDA one: tests/gpu)."""
    with NativeStage(native_lib, CONFIG, 0, CONFIG.n_layer, is_first=True, is_last=True,
                     batch=1, seq_len=4) as stage:
        grads = stage.buffer(Buffer.GRADS)
        grads[:] = 1.0
        stage.start_accumulation()
        assert not np.any(grads)


def test_grad_ready_hook_reports_every_range_once(native_lib: NativeLibrary) -> None:
    """The binding's gradients-ready hook: armed for a backward, it sees each parameter range
    once (the executor's AdamW overlap and data-parallel buckets rely on it); a failing hook
    fails the action."""
    tokens, targets = make_batch(CONFIG, batch=1, seq_len=4, seed=3)
    with NativeStage(native_lib, CONFIG, 0, CONFIG.n_layer, is_first=True, is_last=True,
                     batch=1, seq_len=4) as stage:
        seen: list[tuple[int, int]] = []
        stage.set_grad_ready(lambda offset, count: seen.append((offset, count)))
        stage.forward(0, tokens=tokens, targets=targets)
        stage.backward(0)
        covered = sorted(seen)
        assert sum(count for _, count in covered) == stage.num_params
        assert all(a + n <= b for (a, n), (b, _) in itertools.pairwise(covered))

        def fail(offset: int, count: int) -> None:
            raise RuntimeError("hook failed")

        stage.set_grad_ready(fail)
        stage.forward(0, tokens=tokens, targets=targets)
        with pytest.raises(NativeError):
            stage.backward(0)
        stage.set_grad_ready(None)


def test_weight_decay_only_on_matrices(native_lib: NativeLibrary) -> None:
    """Zero gradients: AdamW moves only by decay, and only the 2-D tensors."""
    with NativeStage(native_lib, CONFIG, 0, CONFIG.n_layer, is_first=True, is_last=True,
                     batch=1, seq_len=4) as stage:
        params = stage.buffer(Buffer.PARAMS)
        params[:] = 1.0
        stage.adamw_step(lr=0.5, beta1=0.9, beta2=0.95, eps=1e-8, weight_decay=0.1, step=1)
        for info in stage.tensors:
            view = stage.tensor_view(Buffer.PARAMS, info.name)
            expected = np.float32(1.0 - 0.5 * 0.1) if len(info.shape) == 2 else np.float32(1.0)
            assert info.decay == (len(info.shape) == 2)
            np.testing.assert_array_equal(view, np.full(info.shape, expected, np.float32))


def native_train(
    lib: NativeLibrary, stages: list[NativeStage], batches: list[tuple[np.ndarray, np.ndarray]],
    settings: ref.TrainSettings,
) -> list[tuple[float, float]]:
    """The executor's step, in process: fwd/bwd, tied-wte sync, global norm, clip, AdamW."""
    history = []
    kind = LrKind.COSINE if settings.cosine else LrKind.CONSTANT
    for step, (tokens, targets) in enumerate(batches):
        for stage in stages:
            stage.zero_grad()
        loss = chain_step(stages, tokens, targets)
        sync_tied_wte(stages)
        sq = sum(s.grad_sq_sum(include_wte=not (s.is_last and not s.is_first)) for s in stages)
        norm = math.sqrt(sq)
        coef = lib.clip_coef(norm, settings.grad_clip)
        lr = lib.lr_at(kind, step, settings.max_lr, settings.min_lr, settings.warmup_steps,
                       settings.total_steps)
        for stage in stages:
            stage.adamw_step(lr=lr, beta1=settings.beta1, beta2=settings.beta2, eps=settings.eps,
                             weight_decay=settings.weight_decay, step=step + 1, grad_scale=coef)
        history.append((loss, norm))
    return history


@pytest.mark.parametrize("n_stages", [1, 3])
def test_ten_steps_loss_trajectory_matches_torch(
    native_lib: NativeLibrary, tmp_path: Path, n_stages: int
) -> None:
    model, weights = saved_model(CONFIG, tmp_path, seed=41)
    # two batches in turn: a model this small can learn them, so the loss falls
    batches = [make_batch(CONFIG, batch=2, seq_len=16, seed=100 + i % 2) for i in range(10)]
    # max_lr high enough and clip low enough that clipping and the schedule both matter
    settings = ref.TrainSettings(max_lr=3e-3, min_lr=3e-4, warmup_steps=3, total_steps=10,
                                 grad_clip=0.5)
    ref_history = ref.train(model, [torch_batch(t, y) for t, y in batches], settings)
    stages = make_chain(native_lib, CONFIG, stage_bounds(CONFIG.n_layer, n_stages), 2, 16,
                        weights)
    history = native_train(native_lib, stages, batches, settings)

    assert any(norm > settings.grad_clip for _, norm in ref_history)  # clipping was active
    assert ref_history[-1][0] < ref_history[0][0] - 0.05  # it learned something
    for step, ((loss, norm), (ref_loss, ref_norm)) in enumerate(
        zip(history, ref_history, strict=True)
    ):
        assert abs(loss - ref_loss) <= TOLERANCE * abs(ref_loss), f"step {step}"
        assert abs(norm - ref_norm) <= 1e-4 * ref_norm, f"step {step}"
    # final weights agree too
    state = {n: p.detach().numpy() for n, p in model.named_parameters()}
    for stage in stages:
        for info in stage.tensors:
            if info.name != "lm_head.weight":
                got = stage.tensor_view(Buffer.PARAMS, info.name)
                assert rel_err(got, state[info.name]) <= 1e-4, info.name


def test_torch_adamw_is_the_single_tensor_path() -> None:
    """The reference pins foreach=False (the path the C step mirrors)."""
    model = ref.make_model(CONFIG, seed=1)
    optimizer = ref.make_optimizer(model, ref.TrainSettings())
    assert optimizer.defaults["foreach"] is False
    assert isinstance(optimizer, torch.optim.AdamW)
