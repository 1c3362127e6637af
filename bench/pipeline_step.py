"""Benchmark: `gantry train` step time (pp=1 and pp=2 1F1B under mpirun) next to the PyTorch
reference on CPU for the same model and global batch. Prints one markdown table row per run.

Usage: python bench/pipeline_step.py [--lib native/build/libgantry_native.so]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from launcher.job_dir import METRICS_FILE
from launcher.native.model_config import GPTConfig
from launcher.reference.gpt2_torch import TrainSettings, make_model, make_optimizer
from tests.integration.pipeline_helpers import gantry_train, write_job

MODEL = {"n_layer": 4, "n_head": 4, "n_embd": 128, "vocab_size": 512, "seq_len": 64}
M, B, STEPS = 4, 4, 8


def torch_step_s() -> float:
    torch.set_num_threads(1)
    cfg = GPTConfig(MODEL["vocab_size"], MODEL["seq_len"], MODEL["n_layer"], MODEL["n_head"],
                    MODEL["n_embd"])
    model = make_model(cfg, seed=1)
    opt = make_optimizer(model, TrainSettings())
    tokens = torch.randint(0, cfg.vocab_size, (M * B, cfg.max_seq_len))
    times = []
    for _ in range(STEPS):
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        model(tokens, tokens).backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        times.append(time.perf_counter() - t0)
    return statistics.median(times[2:])


def gantry_step_s(lib: Path, pp: int, schedule: str) -> float:
    with tempfile.TemporaryDirectory() as tmp:
        job = write_job(Path(tmp), "bench", pp=pp, dp=1, schedule=schedule, m=M, batch=B,
                        model=MODEL, train={"steps": STEPS})
        result = gantry_train(job, pp, lib, run_dir=Path(tmp) / "run")
        if result.returncode != 0:
            raise SystemExit(result.stderr)
        lines = (Path(tmp) / "run" / METRICS_FILE).read_text().splitlines()
        return float(statistics.median(
            max(r["total_s"] for r in json.loads(line)["ranks"]) for line in lines[2:]))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--lib", type=Path, default=Path("native/build/libgantry_native.so"))
    lib = parser.parse_args().lib.resolve()
    anchor = torch_step_s()
    print(f"| PyTorch {torch.__version__} CPU, 1 thread | 1 process | "
          f"{anchor * 1e3:.1f} ms | 1.00 |")
    for pp, schedule in [(1, "1f1b"), (2, "1f1b"), (2, "zb-h1")]:
        t = gantry_step_s(lib, pp, schedule)
        print(f"| gantry native, OMP 1 thread/rank | pp={pp} {schedule} | {t * 1e3:.1f} ms | "
              f"{t / anchor:.2f} |")


if __name__ == "__main__":
    main()
