"""What pairing the weight-gradient passes of two micro-batches would buy at PP=2, in theory.

A split-backward schedule runs W (the weight gradients) once per micro-batch: its products
have K = the micro-batch's tokens (4,096 at 1.5B) and add into the fp32 gradients each time.
Run for two micro-batches at once (their activations side by side, K = 8,192), the same
products cost less: the one-GPU step's weight products take 146.7 instead of
153.3 ms with micro-batches of 8 instead of 4 sequences (-4.3%, kernel times,
`bench/results/op-profile-h200x1-2026-12-02-15e430e-2-mbs{4,8}-prefill.txt`). Pairing moves
W(s, 2k) to run right before W(s, 2k + 1) (a W feeds only the optimizer, so delaying it breaks
no dependency; it holds the micro-batch's activations longer), and the pair costs
2 x (1 - saving) x W. This script re-simulates the recorded PP=2 rows of the split-backward
schedules with each rank's measured op costs, unpaired and paired:

    python3 bench/weight_pairing_theory.py bench/results/gpu-bench-h200x2-2026-12-01-87a4aae.jsonl
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench_gantry_gpu import rank_cost_simulation
from rank_cost_theory import BENCH_VIRTUAL_STAGES

from launcher.schedules import CHUNKED, compute_orders
from launcher.schedules.table import ComputeStep, Op, build_table

MEASURED_SAVING = 0.043
"""Weight products of 8-sequence micro-batches vs 4-sequence ones, 1.5B, one H200 (above)."""

SPLIT_BACKWARD = ("zb-h1", "zb-h2", "zb-interleaved")
"""The schedules whose W passes run on their own."""


def split_backward_orders(name: str, pp: int, m: int, v: int) -> list[list[ComputeStep]]:
    """The compute orders of a split-backward (zero-bubble) schedule."""
    if name not in SPLIT_BACKWARD:
        raise ValueError(f"{name}: not a split-backward schedule ({', '.join(SPLIT_BACKWARD)})")
    return compute_orders(name, pp, m, v)


def pair_weight_steps(orders: list[list[ComputeStep]]) -> list[list[ComputeStep]]:
    """Each rank's order with W(s, 2k) moved to right before W(s, 2k + 1) (where the rank runs
    both); everything else keeps its order."""
    paired = []
    for order in orders:
        weights = {(s, mb) for op, s, mb in order if op is Op.WEIGHT}
        moved = {(s, mb) for s, mb in weights if mb % 2 == 0 and (s, mb + 1) in weights}
        out: list[ComputeStep] = []
        for op, s, mb in order:
            if op is Op.WEIGHT and (s, mb) in moved:
                continue
            if op is Op.WEIGHT and mb % 2 == 1 and (s, mb - 1) in moved:
                out.append((Op.WEIGHT, s, mb - 1))
            out.append((op, s, mb))
        paired.append(out)
    return paired


def adjacent_weight_pairs(orders: list[list[ComputeStep]]) -> list[set[tuple[int, int]]]:
    """Per rank, the W steps (stage, micro-batch) that already run back to back with another W
    of the same stage (taken two at a time, in order): the ones pairing can merge without
    moving anything (at PP=2: the drain)."""
    pairs = []
    for order in orders:
        merged: set[tuple[int, int]] = set()
        i = 0
        while i + 1 < len(order):
            (op_a, s_a, mb_a), (op_b, s_b, mb_b) = order[i], order[i + 1]
            if op_a is Op.WEIGHT and op_b is Op.WEIGHT and s_a == s_b:
                merged |= {(s_a, mb_a), (s_b, mb_b)}
                i += 2
            else:
                i += 1
        pairs.append(merged)
    return pairs


def scaled_weight_costs(op_ms_by_rank: list[dict[str, list[float]]], saving: float
                        ) -> list[dict[str, list[float]]]:
    """op_ms_by_rank with every W cost reduced by `saving` (a fraction)."""
    out = []
    for ops in op_ms_by_rank:
        scaled = dict(ops)
        mean, total = ops["weight"]
        scaled["weight"] = [mean * (1 - saving), total * (1 - saving)]
        out.append(scaled)
    return out


def compare(name: str, m: int, v: int, op_ms_by_rank: list[dict[str, list[float]]],
            saving: float) -> dict[str, Any]:
    """Makespan and bubble of the schedule as recorded, with every W paired (`pair_weight_steps`)
    and with only the back-to-back ones paired (their order kept, the paired ones cheaper)."""
    orders = split_backward_orders(name, len(op_ms_by_rank), m, v)
    pp = len(op_ms_by_rank)
    base_table = build_table(name, pp, v, m, orders)
    paired_table = build_table(name, pp, v, m, pair_weight_steps(orders))
    base = rank_cost_simulation(base_table, op_ms_by_rank)
    paired = rank_cost_simulation(paired_table, scaled_weight_costs(op_ms_by_rank, saving))
    adjacent = adjacent_weight_pairs(orders)
    # the back-to-back pairs alone: each rank's W mean cost lowered by its paired share
    adjacent_costs = [scaled_weight_costs([ops], saving * len(pairs) / m / v)[0]
                      for ops, pairs in zip(op_ms_by_rank, adjacent, strict=True)]
    tail = rank_cost_simulation(base_table, adjacent_costs)
    return {"schedule": name, "v": v, "saving": saving,
            "makespan_ms": round(base.makespan * 1e3, 2),
            "makespan_all_paired_ms": round(paired.makespan * 1e3, 2),
            "makespan_adjacent_paired_ms": round(tail.makespan * 1e3, 2),
            "adjacent_pairs": [len(pairs) // 2 for pairs in adjacent],
            "bubble": round(base.bubble_fraction, 4),
            "bubble_all_paired": round(paired.bubble_fraction, 4),
            "slots": list(base_table.slots_per_stage),
            "slots_all_paired": list(paired_table.slots_per_stage)}


def recorded_rows(lines: list[str]) -> list[dict[str, Any]]:
    """gantry's PP=2 rows of the split-backward schedules that carry per-rank op costs."""
    rows = [json.loads(line) for line in lines if line.strip()]
    return [r for r in rows if r.get("impl") == "gantry" and r.get("mode") == "pp2"
            and r.get("schedule") in SPLIT_BACKWARD
            and r.get("timeline", {}).get("op_ms_by_rank")]


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("results", type=Path, help="a gpu-bench results .jsonl with PP=2 rows")
    p.add_argument("--saving", type=float, default=MEASURED_SAVING,
                   help="fraction by which a paired W is cheaper per micro-batch")
    a = p.parse_args(argv[1:])
    for r in recorded_rows(a.results.read_text().splitlines()):
        v = BENCH_VIRTUAL_STAGES if r["schedule"] in CHUNKED else 1
        row = compare(r["schedule"], int(r["nmb"]), v, r["timeline"]["op_ms_by_rank"],
                      a.saving)
        print(json.dumps({"tokens_per_s": r["tokens_per_s"], **row}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
