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

from tests.integration.pipeline_helpers import gantry_train, write_job

MODEL = {"n_layer": 4, "n_head": 4, "n_embd": 128, "vocab_size": 512, "seq_len": 64}
M, B, STEPS = 2, 2, 18


def run(lib: Path, checkpoint: dict[str, Any] | None) -> tuple[list[float], float]:
    """(per-step wall seconds after the first 2 steps, checkpoint MB)."""
    with tempfile.TemporaryDirectory() as tmp:
        ckpt = {**checkpoint, "dir": str(Path(tmp) / "ckpt")} if checkpoint else None
        job = write_job(Path(tmp), "bench", pp=1, dp=1, schedule="1f1b", m=M, batch=B,
                        model=MODEL, train={"steps": STEPS}, checkpoint=ckpt)
        result = gantry_train(job, 1, lib, run_dir=Path(tmp) / "run")
        if result.returncode != 0:
            raise SystemExit(result.stderr)
        times = [json.loads(line)["time"] for line in
                 (Path(tmp) / "run" / "metrics.jsonl").read_text().splitlines()]
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
    args = parser.parse_args()
    variants: list[tuple[str, dict[str, Any] | None]] = [
        ("no checkpoint (anchor)", None),
        ("checkpoint every step, sync", {"interval": 1, "keep": 2, "async_write": False}),
        ("checkpoint every step, async", {"interval": 1, "keep": 2, "async_write": True}),
        ("checkpoint every 4 steps, sync", {"interval": 4, "keep": 2, "async_write": False}),
        ("checkpoint every 4 steps, async", {"interval": 4, "keep": 2, "async_write": True}),
    ]
    samples: dict[str, list[float]] = {name: [] for name, _ in variants}
    sizes: dict[str, float] = {}
    for _ in range(args.repeat):  # interleaved, so load drifts hit every variant alike
        for name, ckpt in variants:
            steps, size = run(args.lib, ckpt)
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
