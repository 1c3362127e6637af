"""Benchmark: what a checkpoint costs the training loop, written synchronously vs in the
background (checkpoint.async_write). One `gantry train` process (pp=1), a checkpoint after
every step (the worst case) or every 4 steps, mean wall time per step from metrics.jsonl's
"time" stamps (so the checkpoint's share of the critical path is included). Anchor: the
same run without checkpoints, measured in the same invocation. Prints markdown table rows.

Usage: python bench/checkpoint_async.py [--lib native/build/libgantry_native.so] [--repeat 3]
"""

from __future__ import annotations

import argparse
import itertools
import json
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from launcher.job_dir import EVENTS_FILE, METRICS_FILE
from tests.integration.pipeline_helpers import gantry_train, write_job

MODELS: dict[str, tuple[dict[str, int], int, int]] = {
    "tiny": ({"n_layer": 4, "n_head": 4, "n_embd": 128, "vocab_size": 512, "seq_len": 64}, 2, 2),
    "350m": ({"n_layer": 24, "n_head": 16, "n_embd": 1024, "vocab_size": 50304,
              "seq_len": 1024}, 8, 8),
    "1.5b": ({"n_layer": 48, "n_head": 25, "n_embd": 1600, "vocab_size": 50304,
              "seq_len": 1024}, 8, 4),
}
"""name -> (model, micro-batches, sequences per micro-batch)."""


def run(lib: Path, checkpoint: dict[str, Any] | None, model: str = "tiny",
        steps: int = 18) -> tuple[list[float], float]:
    """(per-step wall seconds after the first 2 steps, checkpoint MB)."""
    shape, m, batch = MODELS[model]
    with tempfile.TemporaryDirectory() as tmp:
        ckpt = {**checkpoint, "dir": str(Path(tmp) / "ckpt")} if checkpoint else None
        job = write_job(Path(tmp), "bench", pp=1, dp=1, schedule="1f1b", m=m, batch=batch,
                        model=shape, train={"steps": steps}, checkpoint=ckpt)
        result = gantry_train(job, 1, lib, run_dir=Path(tmp) / "run")
        if result.returncode != 0:
            raise SystemExit(result.stderr)
        times = [json.loads(line)["time"] for line in
                 (Path(tmp) / "run" / METRICS_FILE).read_text().splitlines()]
        for line in (Path(tmp) / "run" / EVENTS_FILE).read_text().splitlines():
            event = json.loads(line)
            if event["event"] == "checkpoint":  # where each save's time went
                print(f"  checkpoint step {event['step']} (complete after step "
                      f"{event['completed_after_step']}): {event['bytes'] / 1e6:.1f} MB, copy "
                      f"{event['copy_s']:.2f} s, write + hash {event['write_s']:.2f} s, sync "
                      f"{event['sync_s']:.2f} s", file=sys.stderr, flush=True)
        size = 0.0
        if ckpt:
            newest = sorted((Path(tmp) / "ckpt").iterdir())[-1]
            size = sum(p.stat().st_size for p in newest.iterdir()) / 1e6
        return [b - a for a, b in itertools.pairwise(times[2:])], size


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--lib", type=Path,
                        default=Path(__file__).resolve().parents[1] / "native" / "build"
                        / "libgantry_native.so")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--model", choices=sorted(MODELS), default="tiny")
    parser.add_argument("--steps", type=int, default=18)
    parser.add_argument("--interval", type=int, default=0,
                        help="only checkpoints every N steps (default: every step and every 4)")
    parser.add_argument("--lags", type=int, nargs="+", default=[1],
                        help="checkpoint.max_lag_steps values for the async runs (default: 1)")
    args = parser.parse_args()
    intervals = [args.interval] if args.interval > 0 else [1, 4]
    variants: list[tuple[str, dict[str, Any] | None]] = [("no checkpoint (anchor)", None)]
    for interval in intervals:
        every = "every step" if interval == 1 else f"every {interval} steps"
        variants.append((f"checkpoint {every}, sync",
                         {"interval": interval, "keep": 2, "async_write": False}))
        for lag in args.lags:
            lag_note = "" if lag == 1 else f", max_lag_steps {lag}"
            variants.append((f"checkpoint {every}, async{lag_note}",
                             {"interval": interval, "keep": 2, "async_write": True,
                              "max_lag_steps": lag}))
    samples: dict[str, list[float]] = {name: [] for name, _ in variants}
    sizes: dict[str, float] = {}
    for _ in range(args.repeat):  # interleaved, so load drifts hit every variant alike
        for name, ckpt in variants:
            steps, size = run(args.lib, ckpt, args.model, args.steps)
            print(f"{name}: steps ms {[round(x * 1e3, 1) for x in steps]}", file=sys.stderr,
                  flush=True)
            samples[name].extend(steps)
            sizes[name] = size
    anchor = statistics.mean(samples[variants[0][0]])
    print("| run | checkpoint MB | mean step ms | median ms | p90 ms | mean vs anchor | samples |")
    print("|---|---|---|---|---|---|---|")
    for name, _ in variants:
        values = sorted(samples[name])
        mean, median = statistics.mean(values), statistics.median(values)
        p90 = values[int(0.9 * (len(values) - 1))]
        print(f"| {name} | {sizes[name]:.1f} | {mean * 1e3:.1f} | {median * 1e3:.1f} | "
              f"{p90 * 1e3:.1f} | {mean / anchor:.2f} | {len(values)} |")


if __name__ == "__main__":
    main()
