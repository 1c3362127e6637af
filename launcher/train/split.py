"""Layer split of the pipeline: contiguous layer ranges balanced by FLOPs, the head counted.

Per token, a GPT-2 block costs about ``24 C^2 + 4 T C`` flops forward (the four matrix
products and attention), the output head ``2 C V`` (on the last stage); the embedding lookup
is free. The split minimises the most expensive stage (exact dynamic programme), every stage
gets at least one layer, ties go to the earliest split.
"""

from __future__ import annotations

from launcher.schedules import ScheduleError


def layer_flops(n_embd: int, seq_len: int) -> int:
    return 24 * n_embd * n_embd + 4 * seq_len * n_embd


def head_flops(n_embd: int, vocab_size: int) -> int:
    return 2 * n_embd * vocab_size


def split_layers(
    n_layer: int, n_stages: int, n_embd: int, seq_len: int, vocab_size: int
) -> list[tuple[int, int]]:
    """(layer_begin, layer_end) of each of n_stages stages."""
    if not 1 <= n_stages <= n_layer:
        raise ScheduleError(f"{n_stages} stages but the model has {n_layer} layers")
    layer = layer_flops(n_embd, seq_len)
    head = head_flops(n_embd, vocab_size)

    def cost(begin: int, end: int, last: bool) -> int:
        return (end - begin) * layer + (head if last else 0)

    inf = float("inf")
    # best[s][l]: minimal max-cost splitting layers [0, l) into s stages; cut[s][l]: last cut
    best = [[inf] * (n_layer + 1) for _ in range(n_stages + 1)]
    cut = [[0] * (n_layer + 1) for _ in range(n_stages + 1)]
    best[0][0] = 0
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
