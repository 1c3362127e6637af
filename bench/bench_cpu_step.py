"""CPU training-step time of the native library next to PyTorch CPU, same model and batch.

One step = zero grads, forward + backward of one micro-batch, global grad norm, clip, AdamW.
Each side runs in its own subprocess (separate OpenMP/BLAS runtimes) with the same thread count;
the median of --steps timed steps after --warmup steps is reported. Default model: GPT-2 with
6 layers, d=384, 6 heads, T=256, B=4, vocab 320 (the byte tokenizer's 257, padded).

    python bench/bench_cpu_step.py [--threads N] [--steps 10] [--markdown]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


def model_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--layers", type=int, default=6)
    parser.add_argument("--embd", type=int, default=384)
    parser.add_argument("--heads", type=int, default=6)
    parser.add_argument("--seq", type=int, default=256)
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--vocab", type=int, default=320)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1)


def run_side(args: argparse.Namespace) -> dict[str, object]:
    import numpy as np

    from launcher.native.model_config import GPTConfig

    config = GPTConfig(args.vocab, args.seq, args.layers, args.heads, args.embd)
    rng = np.random.default_rng(0)
    data = rng.integers(0, 257, size=(args.batch, args.seq + 1), dtype=np.int32)
    tokens, targets = np.ascontiguousarray(data[:, :-1]), np.ascontiguousarray(data[:, 1:])
    times = []
    if args.side == "torch":
        import torch

        from launcher.reference import gpt2_torch as ref

        torch.set_num_threads(args.threads)
        model = ref.make_model(config, seed=1)
        settings = ref.TrainSettings()
        optimizer = ref.make_optimizer(model, settings)
        x, y = torch.from_numpy(tokens.astype(np.int64)), torch.from_numpy(targets.astype(np.int64))
        for i in range(args.warmup + args.steps):
            start = time.perf_counter()
            optimizer.zero_grad(set_to_none=True)
            loss = model(x, y)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            if i >= args.warmup:
                times.append(time.perf_counter() - start)
        version = str(torch.__version__)
    else:
        from launcher.native.binding import NativeLibrary, NativeStage

        # Load the library before torch (imported by the reference): torch's bundled libgomp
        # would otherwise serve ours too, set up before gantry's OpenMP defaults applied.
        lib = NativeLibrary(Path(args.lib))
        from launcher.reference import gpt2_torch as ref

        stage = NativeStage(lib, config, 0, config.n_layer, is_first=True, is_last=True,
                            batch=args.batch, seq_len=args.seq)
        with tempfile.TemporaryDirectory() as tmp:
            weights = Path(tmp) / "w.safetensors"
            ref.save_weights(ref.make_model(config, seed=1), weights)
            stage.load(weights)
        for i in range(args.warmup + args.steps):
            start = time.perf_counter()
            stage.zero_grad()
            stage.forward(0, tokens=tokens, targets=targets)
            stage.backward(0)
            coef = lib.clip_coef(math.sqrt(stage.grad_sq_sum()), 1.0)
            stage.adamw_step(lr=1e-3, beta1=0.9, beta2=0.95, eps=1e-8, weight_decay=0.1,
                             step=i + 1, grad_scale=coef)
            if i >= args.warmup:
                times.append(time.perf_counter() - start)
        version = f"libgantry_native (GT_API_VERSION {lib.lib.gt_api_version()})"
    return {"side": args.side, "median_s": statistics.median(times), "min_s": min(times),
            "version": version}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    model_args(parser)
    parser.add_argument("--side", choices=["native", "torch"], help=argparse.SUPPRESS)
    parser.add_argument("--lib", default=str(REPO / "native" / "build" / "libgantry_native.so"))
    parser.add_argument("--markdown", action="store_true", help="print a docs/BENCHMARKS.md row")
    args = parser.parse_args()
    if args.side:
        print(json.dumps(run_side(args)))
        return 0
    env = dict(os.environ, OMP_NUM_THREADS=str(args.threads),
               OPENBLAS_NUM_THREADS=str(args.threads), PYTHONPATH=str(REPO))
    results: dict[str, dict[str, Any]] = {}
    for side in ("torch", "native", "torch", "native"):  # interleaved: drift hits both
        cmd = [sys.executable, __file__, "--side", side, "--lib", args.lib]
        for flag in ("layers", "embd", "heads", "seq", "batch", "vocab", "steps", "warmup",
                     "threads"):
            cmd += [f"--{flag}", str(getattr(args, flag))]
        out = json.loads(subprocess.run(cmd, env=env, check=True, capture_output=True,
                                        text=True).stdout)
        prev = results.get(side)
        if prev is None or out["median_s"] < prev["median_s"]:
            results[side] = out
    ratio = results["native"]["median_s"] / results["torch"]["median_s"]
    shape = (f"L={args.layers} C={args.embd} NH={args.heads} T={args.seq} B={args.batch} "
             f"V={args.vocab}")
    print(f"model {shape}, {args.threads} thread(s), median of {args.steps} steps")
    for side in ("torch", "native"):
        r = results[side]
        print(f"  {side:6s} {r['median_s'] * 1e3:9.1f} ms/step  (min {r['min_s'] * 1e3:.1f})"
              f"  {r['version']}")
    print(f"  native / torch = {ratio:.2f}x")
    if args.markdown:
        print(f"| {time.strftime('%Y-%m-%d')} | {platform.processor() or platform.machine()}, "
              f"{args.threads} thr | {shape} | {results['torch']['median_s'] * 1e3:.1f} | "
              f"{results['native']['median_s'] * 1e3:.1f} | {ratio:.2f}x |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
