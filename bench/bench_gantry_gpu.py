"""gantry's side of the GPU benchmark: one `gantry train` run (no torch in the process, so the
CUDA library's cuDNN flash attention is used), in the anchor's terms.

Writes a job file for the anchor's configs (bench/anchors/torch_pp_baseline.py: GPT of
L layers, d channels, seq 1024, vocab 50304, random tokens), runs `gantry train` alone (single
GPU) or under `mpirun -np 2` (PP=2, one GPU per rank), and prints one JSON line: tokens/s over
the timed steps by wall clock (rank 0, Python loop included), step time, TFLOP/s per GPU with
the anchor's FLOP formula, peak device memory in use per rank (cudaMemGetInfo after each step),
and, for PP runs, the per-rank timeline of the last step (compute / send / recv / bubble /
sync seconds from the executor's synchronized timers) with the measured bubble next to the
schedule's theoretical bubble (the project's simulator with unit costs F=1, B=2, W=1, and with
the op costs measured in this run).

    python3 bench/bench_gantry_gpu.py --layout pp2 --schedule 1f1b --layers 24 --dmodel 1024 \
        --heads 16 --mbs 8 --nmb 8 --lib native/build-cuda/libgantry_native.so --work DIR
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from gpu_clocks import ClockSampler  # noqa: E402

from launcher.job_dir import METRICS_FILE, TRACE_FILE  # noqa: E402
from launcher.schedules import CHUNKED, SCHEDULES, Op, generate  # noqa: E402
from launcher.schedules.simulator import SimResult, simulate, with_unit_defaults  # noqa: E402
from launcher.schedules.table import ScheduleTable  # noqa: E402

_TUNING_PREFIXES = ("GANTRY_", "NCCL_")
"""Variables that change the native library's or NCCL's behaviour (GANTRY_P2P_TRANSPORT,
GANTRY_OPT_OVERLAP, GANTRY_DP_OVERLAP, ...): every one set is passed to every rank."""

_LAYOUT = re.compile(r"^(?:single|pp(\d+)|dp(\d+)|pp(\d+)xdp(\d+))$")


def parse_layout(text: str) -> tuple[int, int]:
    """(pp, dp) of a layout: single, ppN, dpM or ppNxdpM (one process and GPU per rank)."""
    match = _LAYOUT.match(text)
    if match is None:
        raise argparse.ArgumentTypeError(
            f"layout '{text}' is not allowed (single, ppN, dpM or ppNxdpM, e.g. pp2xdp2)")
    pp_only, dp_only, pp, dp = (int(g) if g else None for g in match.groups())
    layout = (pp or pp_only or 1, dp or dp_only or 1)
    if 0 in (pp_only, dp_only, pp, dp) or (text != "single" and layout == (1, 1)):
        raise argparse.ArgumentTypeError(
            f"layout '{text}' is not allowed (counts of at least 1 and at least 2 ranks; one "
            "rank is 'single')")
    return layout

_OPS = {"forward": Op.FORWARD, "backward": Op.BACKWARD, "backward_input": Op.BACKWARD_INPUT,
        "weight": Op.WEIGHT}


def flops_per_token(layers: int, d: int, vocab: int, seq: int) -> float:
    """The anchor's formula (torch_pp_baseline.flops_per_token), copied: that file imports
    torch."""
    n = layers * 12 * d * d + vocab * d
    return 6 * n + 12 * layers * d * seq


def write_job(a: argparse.Namespace, work: Path) -> Path:
    schedule = a.schedule if a.pp > 1 else "1f1b"
    job = {
        "name": f"bench-{a.layout}-{schedule}",
        "model": {"n_layer": a.layers, "n_head": a.heads, "n_embd": a.d,
                  "vocab_size": a.vocab, "seq_len": a.seq},
        "parallelism": {"pp": a.pp, "dp": a.dp, "schedule": schedule,
                        "micro_batches": a.nmb, "micro_batch_size": a.mbs,
                        "virtual_stages": a.v},
        "train": {"steps": a.warmup + a.steps, "lr": 1.0e-4, "lr_schedule": "constant",
                  "warmup_steps": 0, "weight_decay": 0.1, "grad_clip": a.grad_clip, "seed": 0},
    }
    path = work / "job.yaml"
    path.write_text(yaml.safe_dump(job))
    return path


def run_gantry(a: argparse.Namespace, job: Path, work: Path) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "launcher", "train", str(job), "--lib", a.lib,
           "--run-dir", str(work / "run")]
    if a.pp * a.dp > 1:
        passed = ["PYTHONPATH", "TORCH_SYMM_MEM_DISABLE_MULTICAST", "NVSHMEM_DISABLE_NVLS",
                  "GANTRY_ATTENTION"]
        passed += sorted(k for k in os.environ
                         if k.startswith(_TUNING_PREFIXES) and k not in passed)
        cmd = ["mpirun", "--allow-run-as-root", "--oversubscribe", "-np", str(a.pp * a.dp),
               *[x for k in passed for x in ("-x", k)], "--bind-to", "none", *cmd]
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH", "")]))
    env.setdefault("GANTRY_ATTENTION", "cudnn")
    # own process group: on a timeout mpirun and every rank get SIGTERM, then SIGKILL
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            cwd=REPO, env=env, start_new_session=True)
    try:
        stdout, stderr = proc.communicate(timeout=a.timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            stdout, stderr = proc.communicate(timeout=15)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            stdout, stderr = proc.communicate()
        stderr += f"\ntimed out after {a.timeout} s"
    return subprocess.CompletedProcess(cmd, proc.returncode, stdout, stderr)


def op_costs(trace: dict[str, Any], step: int, v: int) -> dict[Op, float]:
    """Mean seconds of each compute op in `step`, per full stage (x v for the chunked schedules)."""
    durations: dict[Op, list[float]] = {}
    for e in trace["traceEvents"]:
        if e.get("cat") != "compute" or e["args"]["step"] != step:
            continue
        op = _OPS.get(e["name"].split(" ")[0])
        if op is not None:
            durations.setdefault(op, []).append(e["dur"] * 1e-6 * v)
    return {op: statistics.fmean(d) for op, d in durations.items()}


def dp_timings(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per-rank times (ms) of the last step of a data-parallel run and its overlapped buckets:
    compute, sync (the gradient all-reduce's remainder, norm, AdamW) and total."""
    return [{**{k: round(r.get(k, 0.0) * 1e3, 2)
                for k in ("compute_s", "sync_s", "dp_wait_s", "total_s")},
             "dp_buckets": r.get("dp_buckets", 0)}
            for r in records[-1]["ranks"]]


def op_times_by_rank(trace: dict[str, Any], step: int) -> list[dict[str, list[float]]]:
    """Per rank (the trace's pid): each compute op's [mean ms per action, summed ms] in `step`,
    to compare a rank's work with the same layers' share of a one-GPU step."""
    per_rank: dict[int, dict[str, list[float]]] = {}
    for e in trace["traceEvents"]:
        if e.get("cat") != "compute" or e["args"]["step"] != step:
            continue
        op = e["name"].split(" ")[0]
        per_rank.setdefault(int(e["pid"]), {}).setdefault(op, []).append(e["dur"] * 1e-3)
    return [{op: [round(statistics.fmean(d), 3), round(sum(d), 2)] for op, d in ops.items()}
            for _, ops in sorted(per_rank.items())]


def waits_by_rank(trace: dict[str, Any], step: int,
                  min_ms: float = 0.3) -> list[list[list[float | str]]]:
    """Per rank (the trace's pid): its blocked waits in `step` of at least `min_ms`, as
    [ms since the rank's first span of the step, ms waited, what it waited for], in time order:
    where a rank's bubble sits (the fill at the start, gaps in the middle, the drain)."""
    spans: dict[int, list[dict[str, Any]]] = {}
    for e in trace["traceEvents"]:
        if e.get("ph") == "X" and e["args"]["step"] == step:
            spans.setdefault(int(e["pid"]), []).append(e)
    out = []
    for _, events in sorted(spans.items()):
        origin = min(e["ts"] for e in events)
        waits = sorted((e for e in events if e.get("cat") == "wait" and e["dur"] >= min_ms * 1e3),
                       key=lambda e: e["ts"])
        out.append([[round((e["ts"] - origin) * 1e-3, 2), round(e["dur"] * 1e-3, 2), e["name"]]
                    for e in waits])
    return out


def rank_cost_simulation(table: ScheduleTable, op_ms_by_rank: list[dict[str, list[float]]]
                         ) -> SimResult:
    """The simulator on `table` with each rank's own measured op costs (`op_ms_by_rank`: per
    rank, op name -> [mean ms per chunk op, total ms]; a stage op is v chunk ops)."""
    v = table.virtual_stages
    per_rank = [with_unit_defaults({_OPS[name]: mean * 1e-3 * v
                                     for name, (mean, _) in ops.items() if name in _OPS})
                for ops in op_ms_by_rank]
    return simulate(table, per_rank)


def timeline(a: argparse.Namespace, records: list[dict[str, Any]],
             trace: dict[str, Any]) -> dict[str, Any]:
    """Per-rank timeline of the last step, measured bubble vs theory."""
    last = records[-1]
    ranks = last["ranks"]
    table_times = [r["total_s"] - r["sync_s"] for r in ranks]
    makespan = max(table_times)
    busy = sum(r["compute_s"] for r in ranks)
    measured = 1.0 - busy / (makespan * len(ranks))
    v = a.v
    table = generate(a.schedule, a.pp, a.nmb, v)
    costs = op_costs(trace, last["step"] - 1, v)
    full = with_unit_defaults(costs)
    by_rank = op_times_by_rank(trace, last["step"] - 1)
    extra: dict[str, Any] = {}
    if a.dp == 1:  # the trace's pids are the pipeline ranks
        sim = rank_cost_simulation(table, by_rank)
        extra = {"bubble_theory_rank_costs": round(sim.bubble_fraction, 4),
                 "makespan_theory_ms": round(sim.makespan * 1e3, 2),
                 "makespan_ms": round(makespan * 1e3, 2)}
    return {
        "ranks": [{k: round(r[k] * 1e3, 2) for k in
                   ("compute_s", "send_s", "recv_s", "bubble_s", "sync_s", "tied_s", "norm_s",
                    "total_s")}
                  for r in ranks],
        "bubble_measured": round(measured, 4),
        "bubble_theory_unit": round(simulate(table).bubble_fraction, 4),
        "bubble_theory_measured_costs": round(simulate(table, full).bubble_fraction, 4),
        "op_ms": {op.name.lower(): round(c * 1e3 / v, 3) for op, c in costs.items()},
        "op_ms_by_rank": by_rank,
        "waits_by_rank": waits_by_rank(trace, last["step"] - 1),
        **extra,
    }


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--layout", default="single",
                   help="single (1 GPU), ppN, dpM or ppNxdpM (N*M GPUs); each data-parallel "
                   "replica runs the whole micro-batch set, so a step trains dp times the tokens")
    p.add_argument("--schedule", choices=SCHEDULES,
                   default="1f1b")
    p.add_argument("--virtual-stages", dest="v", type=int, default=2,
                   help="model chunks per rank of the chunked schedules (interleaved, "
                   "zb-interleaved; default 2); the others run one")
    p.add_argument("--lib", required=True, help="CUDA libgantry_native.so (built with NCCL)")
    p.add_argument("--work", type=Path, required=True, help="directory for job, metrics, trace")
    p.add_argument("--layers", type=int, default=24)
    p.add_argument("--dmodel", dest="d", type=int, default=1024)
    p.add_argument("--heads", type=int, default=16)
    p.add_argument("--seq", type=int, default=1024)
    p.add_argument("--vocab", type=int, default=50304)
    p.add_argument("--mbs", type=int, default=8)
    p.add_argument("--nmb", type=int, default=8)
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--timeout", type=int, default=300)
    p.add_argument("--grad-clip", type=float, default=0.0,
                   help="global-norm clip (default 0: off, like the PyTorch anchor, whose AdamW "
                   "runs without clipping; with it on, AdamW waits for the global norm)")
    p.add_argument("--variant", default="",
                   help="label of a tuning variant (e.g. the env it ran with), kept in the JSON")
    a = p.parse_args()
    try:
        a.pp, a.dp = parse_layout(a.layout)
    except argparse.ArgumentTypeError as err:
        p.error(str(err))
    if a.v < 1:
        p.error(f"--virtual-stages {a.v}: expected at least 1")
    chunked = a.pp > 1 and a.schedule in CHUNKED
    a.v = a.v if chunked else 1  # the chunks per rank this run has, from here on
    a.work.mkdir(parents=True, exist_ok=True)
    job = write_job(a, a.work)
    with ClockSampler() as clocks:
        done = run_gantry(a, job, a.work)
    (a.work / "train.log").write_text(done.stdout + done.stderr)
    base = {"impl": "gantry", "mode": a.layout, "schedule": a.schedule if a.pp > 1 else "-",
            "layers": a.layers, "d": a.d, "mbs": a.mbs, "nmb": a.nmb, "grad_clip": a.grad_clip}
    if chunked:
        base["virtual_stages"] = a.v
    if a.variant:
        base["variant"] = a.variant
    metrics_path = a.work / "run" / METRICS_FILE
    records = ([json.loads(x) for x in metrics_path.read_text().splitlines()]
               if metrics_path.is_file() else [])
    trained = len(records) == a.warmup + a.steps and (a.work / "run" / TRACE_FILE).is_file()
    if done.returncode != 0:
        tail = (done.stderr or done.stdout).strip().splitlines()[-3:]
        failure = f"exit {done.returncode}: {' | '.join(tail)}"
        if not trained:
            print(json.dumps({**base, "error": failure}))
            return 1
        base["warning"] = f"every step ran, then the run failed: {failure}"

    timed = records[a.warmup - 1:]
    wall = (timed[-1]["wall_s"] - timed[0]["wall_s"]) / (len(timed) - 1)
    ngpu = a.pp * a.dp
    tok = a.mbs * a.nmb * a.seq * a.dp / wall
    info = next((line for line in done.stdout.splitlines() if line.startswith("native backend")),
                "")
    result = {
        **base, "info": info, "tokens_per_s": round(tok), "step_ms": round(wall * 1e3, 2),
        "tflops_per_gpu": round(tok * flops_per_token(a.layers, a.d, a.vocab, a.seq) / 1e12
                                / ngpu, 1),
        "mem_used_gib": round(max(r.get("mem_used_bytes", 0) for rec in records
                                  for r in rec["ranks"]) / 2**30, 1),
        "first_loss": round(records[0]["loss"], 4), "last_loss": round(records[-1]["loss"], 4),
        # parameter ranges AdamW updated during the backward, per rank (0: after the table)
        "opt_ranges": [r.get("opt_ranges", 0) for r in records[-1]["ranks"]],
    }
    if a.pp > 1:
        trace = json.loads((a.work / "run" / TRACE_FILE).read_text())
        result["timeline"] = timeline(a, records, trace)
    if a.dp > 1:
        result["dp_ranks"] = dp_timings(records)
    if clocks.summary:  # SM clocks / power while busy (bench/gpu_clocks.py)
        result["gpu_clocks"] = clocks.summary
    print(json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
