"""Layer split of the pipeline: contiguous layer ranges balanced by a calibrated cost model.

Cost per token, in forward flops: a GPT-2 block costs ``24 C^2 + 4 T C`` (the four matrix
products and attention); the output head ``2 C V`` on the last stage, weighted by
:data:`HEAD_COST_FACTOR` because its large GEMMs run about twice as fast per flop as a
block's mix of ops; the embedding lookup is free. The split minimises the most expensive
stage (exact dynamic programme), every stage gets at least one layer, ties go to the earliest
split. A job can bypass the model with ``parallelism.stage_layers`` (see docs/jobs.md).
"""

from __future__ import annotations

from collections.abc import Sequence

from launcher.schedules import ScheduleError

#: Weight of the head's flops relative to a block's. Measured 2026-11-30 on 2x H200 (CUDA
#: backend), 350M config (24 layers, C=1024, T=1024, V=50304), PP=2 zb-h1: with the head at
#: full weight the split was 14 + (10 + head) and per-step compute was rank 0 165.9 ms vs
#: rank 1 141.1 ms. The head's GEMMs reach about twice the TFLOP/s of a block's average op
#: (a block also runs flash attention at ~200 TFLOP/s, memory-bound LayerNorm/GELU and
#: smaller products), so its time is about half its flop share. At 0.5 the 350M split is
#: 13 + (11 + head) (expected ~154 / 153 ms) and the 1.5B split (48 layers, C=1600) stays
#: 25 + (23 + head), which measured balanced (356 / 361 ms).
HEAD_COST_FACTOR = 0.5


def layer_flops(n_embd: int, seq_len: int) -> int:
    """Forward flops per token of one transformer block."""
    return 24 * n_embd * n_embd + 4 * seq_len * n_embd


def head_flops(n_embd: int, vocab_size: int) -> int:
    """Forward flops per token of the output head (logits)."""
    return 2 * n_embd * vocab_size


def head_cost(n_embd: int, vocab_size: int) -> float:
    """The head's cost in the units of :func:`layer_flops` (flops scaled by the factor)."""
    return HEAD_COST_FACTOR * head_flops(n_embd, vocab_size)


def ranges_from_counts(counts: Sequence[int]) -> list[tuple[int, int]]:
    """(layer_begin, layer_end) of each stage from layer counts, e.g. [3, 1] -> [(0, 3), (3, 4)]."""
    ranges: list[tuple[int, int]] = []
    begin = 0
    for count in counts:
        ranges.append((begin, begin + count))
        begin += count
    return ranges


def split_layers(
    n_layer: int, n_stages: int, n_embd: int, seq_len: int, vocab_size: int
) -> list[tuple[int, int]]:
    """(layer_begin, layer_end) of each of n_stages stages."""
    if not 1 <= n_stages <= n_layer:
        raise ScheduleError(f"{n_stages} stages but the model has {n_layer} layers")
    layer = layer_flops(n_embd, seq_len)
    head = head_cost(n_embd, vocab_size)

    def cost(begin: int, end: int, last: bool) -> float:
        return (end - begin) * layer + (head if last else 0.0)

    inf = float("inf")
    # best[s][l]: minimal max-cost splitting layers [0, l) into s stages; cut[s][l]: last cut
    best = [[inf] * (n_layer + 1) for _ in range(n_stages + 1)]
    cut = [[0] * (n_layer + 1) for _ in range(n_stages + 1)]
    best[0][0] = 0.0
    for s in range(1, n_stages + 1):
        last = s == n_stages
        for end in range(s, n_layer + 1):
            for begin in range(s - 1, end):
                value = max(best[s - 1][begin], cost(begin, end, last))
                if value < best[s][end]:
                    best[s][end], cut[s][end] = value, begin
    ranges: list[tuple[int, int]] = []
    end = n_layer
    for s in range(n_stages, 0, -1):
        begin = cut[s][end]
        ranges.append((begin, end))
        end = begin
    return ranges[::-1]
