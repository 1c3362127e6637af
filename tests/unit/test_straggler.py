"""The straggler detector (launcher/train/straggler.py): a 20 % slow rank is flagged once its
window is full, a single noisy step is not, ranks are compared only with ranks of the same
stage shape, a rank alone in its shape is compared with the cost model, the warm-up steps are
not judged, and one slow episode gives one finding (and one when it ends)."""

from __future__ import annotations

import random
import statistics

from hypothesis import given
from hypothesis import strategies as st

from launcher.train.split import split_layers
from launcher.train.straggler import (
    WARMUP_STEPS,
    ChunkShape,
    Finding,
    StragglerDetector,
    StragglerSettings,
    median_without,
    rank_shapes,
    shape_cost,
)

MODEL = (64, 16, 256)  # n_embd, seq_len, vocab_size


def pp2_dp2() -> list[tuple[ChunkShape, ...]]:
    """pp=2 x dp=2, default layout: ranks 0, 2 run stage 0; ranks 1, 3 the last stage."""
    return rank_shapes([0, 1, 0, 1], 2, 1, [(0, 2), (2, 4)])


def run(detector: StragglerDetector, steps: list[list[float]]) -> list[Finding]:
    found: list[Finding] = []
    for step, compute in enumerate(steps, 1):
        found += detector.observe(step, compute)
    return found


def jitter(rng: random.Random, value: float, spread: float = 0.03) -> float:
    return value * (1.0 + rng.uniform(-spread, spread))


def test_a_20_percent_slow_rank_is_flagged_when_its_window_is_full() -> None:
    rng = random.Random(1)
    window = 5
    detector = StragglerDetector(pp2_dp2(), StragglerSettings(1.15, window))
    base = [0.10, 0.15, 0.10, 0.15]  # the last stage is slower by shape, not by fault
    steps = [[jitter(rng, t * (1.2 if r == 2 else 1.0)) for r, t in enumerate(base)]
             for _ in range(20)]
    found = run(detector, steps)
    assert [(f.kind, f.rank, f.step, f.basis, f.peers) for f in found] == [
        ("flagged", 2, WARMUP_STEPS + window, "peers", 1)]
    assert 1.15 < found[0].ratio < 1.3
    assert abs(found[0].reference_s - 0.10) < 0.01 and abs(found[0].compute_s - 0.12) < 0.01
    assert found[0].window == window
    assert detector.flagged() == [2]


def test_one_noisy_step_is_not_a_straggler() -> None:
    rng = random.Random(2)
    detector = StragglerDetector(pp2_dp2(), StragglerSettings(1.2, 5))
    steps = [[jitter(rng, 0.1) for _ in range(4)] for _ in range(30)]
    steps[12][3] *= 10.0  # one step of one rank, ten times slower
    steps[20][0] *= 3.0
    assert run(detector, steps) == []


def test_ranks_are_compared_within_their_stage_shape() -> None:
    # the last stage (head + loss) takes 1.6x the first: no one is slow
    shapes = pp2_dp2()
    assert shapes[0] == shapes[2] and shapes[1] == shapes[3] and shapes[0] != shapes[1]
    detector = StragglerDetector(shapes, StragglerSettings(1.2, 4))
    assert run(detector, [[0.1, 0.16, 0.1, 0.16]] * 20) == []
    # ... while a slow last-stage rank is found against the other last-stage rank
    detector = StragglerDetector(shapes, StragglerSettings(1.2, 4))
    found = run(detector, [[0.1, 0.16, 0.1, 0.16 * 1.3]] * 20)
    assert [(f.rank, f.basis) for f in found] == [(3, "peers")]


def test_middle_stages_of_equal_size_share_a_shape() -> None:
    shapes = rank_shapes([0, 1, 2, 3], 4, 1, [(0, 2), (2, 4), (4, 6), (6, 8)])
    assert shapes[1] == shapes[2]
    assert len(set(shapes)) == 3
    # interleaved: a rank's shape is all its chunks
    chunked = rank_shapes([0, 1], 2, 2, [(0, 1), (1, 2), (2, 3), (3, 4)])
    assert chunked[0] == (ChunkShape(1, True, False), ChunkShape(1, False, False))
    assert chunked[1] == (ChunkShape(1, False, False), ChunkShape(1, False, True))


def test_the_median_of_the_peers_leaves_the_rank_out() -> None:
    # 2 ranks per shape: the slow one is compared with the other, not with their mean
    shapes = [(ChunkShape(2, True, True),)] * 2
    detector = StragglerDetector(shapes, StragglerSettings(1.2, 3))
    found = run(detector, [[0.1, 0.125]] * 10)
    assert [(f.rank, round(f.ratio, 3), round(f.reference_s, 3)) for f in found] == [
        (1, 1.25, 0.1)]


def test_a_rank_alone_in_its_shape_is_compared_with_the_cost_model() -> None:
    ranges = split_layers(4, 2, *MODEL)
    shapes = rank_shapes([0, 1], 2, 1, ranges)
    costs = [shape_cost(s, *MODEL) for s in shapes]
    assert costs[0] != costs[1]
    healthy = [[0.001 * c / costs[0] for c in costs]] * 20  # times follow the model
    assert run(StragglerDetector(shapes, StragglerSettings(1.2, 5), costs), healthy) == []
    slow = [[t * (1.3 if r == 1 else 1.0) for r, t in enumerate(healthy[0])]] * 20
    found = run(StragglerDetector(shapes, StragglerSettings(1.2, 5), costs), slow)
    assert [(f.rank, f.basis, f.peers, round(f.ratio, 3)) for f in found] == [
        (1, "model", 1, 1.3)]
    assert found[0].model_ratio is not None and round(found[0].model_ratio, 3) == 1.3
    # without the model a lone rank is never judged
    assert run(StragglerDetector(shapes, StragglerSettings(1.2, 5)), slow) == []


def test_differences_below_the_minimum_excess_are_noise() -> None:
    # microsecond stages: twice as slow, 60 us more, below a 1 ms floor
    steps = [[60e-6, 100e-6, 120e-6, 100e-6]] * 20
    detector = StragglerDetector(pp2_dp2(), StragglerSettings(1.2, 5, min_excess_s=1e-3))
    assert run(detector, steps) == []
    # the same ratio at a tenth of a second is a straggler
    detector = StragglerDetector(pp2_dp2(), StragglerSettings(1.2, 5, min_excess_s=1e-3))
    found = run(detector, [[t * 1000 for t in row] for row in steps])
    assert [(f.kind, f.rank) for f in found] == [("flagged", 2)]


def test_a_single_rank_is_never_judged() -> None:
    shape = [(ChunkShape(4, True, True),)]
    detector = StragglerDetector(shape, StragglerSettings(1.2, 2), [1.0])
    assert run(detector, [[5.0]] * 10) == []


def test_warm_up_steps_are_not_judged() -> None:
    detector = StragglerDetector(pp2_dp2(), StragglerSettings(1.2, WARMUP_STEPS))
    slow_start = [[0.5, 0.1, 0.1, 0.1]] * WARMUP_STEPS + [[0.1] * 4] * 10
    assert run(detector, slow_start) == []
    # the same steps judged from the first (no warm-up) flag rank 0
    eager = StragglerDetector(pp2_dp2(), StragglerSettings(1.2, WARMUP_STEPS, warmup=0))
    assert [(f.kind, f.rank, f.step) for f in run(eager, slow_start)] == [
        ("flagged", 0, WARMUP_STEPS), ("cleared", 0, WARMUP_STEPS + 2)]


def test_one_finding_per_episode() -> None:
    detector = StragglerDetector(pp2_dp2(), StragglerSettings(1.2, 3, warmup=0))
    slow = [0.1, 0.1, 0.13, 0.1]
    healthy = [0.1] * 4
    found = run(detector, [slow] * 10 + [healthy] * 10 + [slow] * 10)
    assert [(f.kind, f.rank, f.step) for f in found] == [
        ("flagged", 2, 3), ("cleared", 2, 12), ("flagged", 2, 22)]


def test_a_rank_hovering_at_the_threshold_is_one_episode() -> None:
    rng = random.Random(3)
    detector = StragglerDetector(pp2_dp2(), StragglerSettings(1.2, 3, warmup=0))
    steps = [[0.1, 0.1, 0.1 * rng.uniform(1.17, 1.23), 0.1] for _ in range(200)]
    found = run(detector, steps)
    assert [(f.kind, f.rank) for f in found] == [("flagged", 2)]


@given(st.lists(st.floats(0, 1e3), min_size=1, max_size=12), st.data())
def test_median_without_is_the_median_of_the_rest(values: list[float],
                                                  data: st.DataObject) -> None:
    ordered = sorted(values)
    index = data.draw(st.integers(0, len(ordered) - 1))
    rest = ordered[:index] + ordered[index + 1:]
    got = median_without(ordered, index)
    assert got == (statistics.median(rest) if rest else None)
