"""Markdown tables of one GPU benchmark call (results.jsonl of bench/run_gpu_bench.sh): gantry's
rows (bench_gantry_gpu.py) next to the PyTorch anchor's rows of the same call.

MFU uses the bf16 peak the anchor measured in the same call (its 8192^3 product, median over
the anchor runs). `vs PyTorch` = gantry tokens/s / the best PyTorch tokens/s of the same model
and layout (single: the single run; PP=2: the best of the anchor's schedules). Runs that
recorded their GPUs' clocks (bench/gpu_clocks.py) get a last table of them.

    python3 bench/gpu_bench_table.py results.jsonl
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path
from typing import Any

_NAMES = {(24, 1024): "350M", (48, 1600): "1.5B", (32, 4096): "7B"}


def _model(r: dict[str, Any]) -> str:
    """The benchmark's name of a (layers, d) config, else e.g. 8L-d32."""
    layers, d = int(r["layers"]), int(r.get("d", 0))
    if (layers, d) in _NAMES:
        return _NAMES[(layers, d)]
    legacy = {24: "350M", 48: "1.5B"}  # rows that predate the d field
    return legacy[layers] if not d and layers in legacy else f"{layers}L-d{d}"


def _layout(r: dict[str, Any]) -> str:
    """gantry's modes single -> 1 GPU, pp2 -> PP=2, dp2 -> DP=2, pp2xdp2 -> PP=2 x DP=2; the
    anchor's modes pp and dp with its pp / dp / world fields (PP=2 where older rows lack them)."""
    mode = str(r["mode"])
    if mode == "single":
        return "1 GPU"
    if mode == "pp":
        dp = int(r.get("dp", 1))
        return f"PP={r.get('pp', 2)}" + (f" x DP={dp}" if dp > 1 else "")
    if mode == "dp":
        return f"DP={r.get('world', r.get('dp', 2))}"
    return " x ".join(f"{part[:2].upper()}={part[2:]}" for part in mode.split("x"))


def tables(rows: list[dict[str, Any]]) -> str:
    torch_rows = [r for r in rows if r.get("impl") != "gantry" and "tokens_per_s" in r]
    ours = [r for r in rows if r.get("impl") == "gantry"]
    peaks = [r["peak_bf16_tflops"] for r in torch_rows if r.get("peak_bf16_tflops")]
    peak = statistics.median(peaks) if peaks else float("nan")
    best: dict[tuple[str, str], dict[str, Any]] = {}
    for r in torch_rows:
        key = (_model(r), _layout(r))
        if key not in best or r["tokens_per_s"] > best[key]["tokens_per_s"]:
            best[key] = r
    out = [f"bf16 peak measured by the anchor in this call: {peak:.1f} TFLOP/s", "",
           "| model | layout | schedule | gantry tokens/s | gantry MFU | gantry mem (max rank) "
           "| PyTorch tokens/s (same call) | PyTorch MFU | vs PyTorch |",
           "|---|---|---|---|---|---|---|---|---|"]
    for r in ours:
        if r.get("variant"):
            r = {**r, "schedule": f"{r['schedule']} ({r['variant']})"}
        key = (_model(r), _layout(r))
        ref = best.get(key)
        if "error" in r:
            out.append(f"| {key[0]} | {key[1]} | {r['schedule']} | failed: {r['error'][:80]} "
                       "| | | | | |")
            continue
        ratio = f"**{r['tokens_per_s'] / ref['tokens_per_s']:.2f}x**" if ref else "-"
        ref_sched = ({"single": "single", "dp": "ddp"}.get(ref["mode"], ref["schedule"])
                     if ref else "")
        ref_text = f"{ref['tokens_per_s'] / 1e3:.1f}K ({ref_sched})" if ref else "-"
        ref_mfu = f"{ref['tflops_per_gpu'] / peak:.1%}" if ref else "-"
        out.append(f"| {key[0]} | {key[1]} | {r['schedule']} | {r['tokens_per_s'] / 1e3:.1f}K "
                   f"| {r['tflops_per_gpu'] / peak:.1%} | {r['mem_used_gib']} GiB | {ref_text} "
                   f"| {ref_mfu} | {ratio} |")
    out += ["", "PyTorch rows of the same call:", "",
            "| model | layout | schedule | tokens/s | MFU |", "|---|---|---|---|---|"]
    for r in torch_rows:
        sched = "-" if r["mode"] in ("single", "dp") else r["schedule"]
        out.append(f"| {_model(r)} | {_layout(r)} | {sched} | {r['tokens_per_s'] / 1e3:.1f}K "
                   f"| {r['tflops_per_gpu'] / peak:.1%} |")
    out += ["", "gantry PP=2 timeline of the last step (ms per rank: compute / send / recv / "
            "bubble / sync / total) and bubble (idle share of both ranks up to the makespan of "
            "the schedule phase) vs the simulator's theory (unit costs F=1 B=2 W=1; the op "
            "costs measured on the ranks, averaged; each rank's own measured costs):", "",
            "| model | schedule | rank 0 | rank 1 | measured bubble | theory (unit) | theory "
            "(measured costs) | theory (each rank's costs) |",
            "|---|---|---|---|---|---|---|---|"]
    for r in ours:
        t = r.get("timeline")
        if not t:
            continue
        if r.get("variant"):
            r = {**r, "schedule": f"{r['schedule']} ({r['variant']})"}
        cells = [" / ".join(f"{x[k]:.1f}" for k in ("compute_s", "send_s", "recv_s", "bubble_s",
                                                     "sync_s", "total_s")) for x in t["ranks"]]
        per_rank = t.get("bubble_theory_rank_costs")  # older recorded rows lack it
        out.append(f"| {_model(r)} | {r['schedule']} | {cells[0]} | {cells[1]} "
                   f"| {t['bubble_measured']:.1%} | {t['bubble_theory_unit']:.1%} "
                   f"| {t['bubble_theory_measured_costs']:.1%} "
                   f"| {'-' if per_rank is None else f'{per_rank:.1%}'} |")
    return "\n".join(out + _clock_table(rows))


def _clock_table(rows: list[dict[str, Any]]) -> list[str]:
    """Each run's GPU clocks while busy (bench/gpu_clocks.py), if any run has them: per GPU,
    mean SM MHz / mean W / the share of samples power-capped."""
    clocked = [r for r in rows if r.get("gpu_clocks")]
    if not clocked:
        return []
    out = ["", "GPU clocks while busy (per GPU: mean SM MHz / mean power W / share of samples "
           "with the power cap active):", "", "| trainer | model | layout | schedule | GPUs |",
           "|---|---|---|---|---|"]
    for r in clocked:
        trainer = "gantry" if r.get("impl") == "gantry" else "PyTorch"
        sched = r.get("schedule", "-")
        if r.get("variant"):
            sched = f"{sched} ({r['variant']})"
        gpus = "; ".join(f"GPU{g['index']} {g['sm_mhz_mean']} / {g['power_w_mean']} / "
                         f"{g['power_capped_share']:.0%}" for g in r["gpu_clocks"])
        out.append(f"| {trainer} | {_model(r)} | {_layout(r)} | {sched} | {gpus} |")
    return out


def main() -> int:
    rows = []
    for line in Path(sys.argv[1]).read_text().splitlines():
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    print(tables(rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
