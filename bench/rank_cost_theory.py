"""The PP=2 bubble in theory with each rank's own measured op costs, for recorded results that
lack it (the 350M PP=2 rows of 2026-11-30): the same simulator on the same
schedule table, fed the per-rank op times every PP=2 row records (`op_ms_by_rank`).

    python3 bench/rank_cost_theory.py bench/results/gpu-bench-h200x2-2026-11-30-5045009-2.jsonl
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench_gantry_gpu import rank_cost_simulation

from launcher.schedules import CHUNKED, generate

BENCH_VIRTUAL_STAGES = 2
"""bench_gantry_gpu.py's --virtual-stages default, which every recorded chunked row ran with."""


def rank_cost_rows(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per gantry PP=2 row with a timeline: schedule, measured bubble, the theory with each
    rank's costs computed here (and the row's own value, `recorded`, where it wrote one) and
    the makespans."""
    out = []
    for r in rows:
        t = r.get("timeline")
        if r.get("impl") != "gantry" or r.get("mode") != "pp2" or not t:
            continue
        v = BENCH_VIRTUAL_STAGES if r["schedule"] in CHUNKED else 1
        sim = rank_cost_simulation(generate(r["schedule"], 2, int(r["nmb"]), v),
                                   t["op_ms_by_rank"])
        table_ms = max(x["total_s"] - x["sync_s"] for x in t["ranks"])
        out.append({"schedule": r["schedule"], "variant": r.get("variant"),
                    "bubble_measured": t["bubble_measured"],
                    "bubble_theory_rank_costs": round(sim.bubble_fraction, 4),
                    "recorded": t.get("bubble_theory_rank_costs"),
                    "makespan_theory_ms": round(sim.makespan * 1e3, 2),
                    "makespan_ms": round(table_ms, 2)})
    return out


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: rank_cost_theory.py RESULTS.jsonl", file=sys.stderr)
        return 2
    lines = Path(argv[1]).read_text().splitlines()
    for row in rank_cost_rows([json.loads(line) for line in lines if line.strip()]):
        print(json.dumps(row))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
