"""Helpers of the pipeline training tests: job files, mpirun launches, the PyTorch reference."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

if TYPE_CHECKING:
    from launcher.reference.gpt2_torch import TrainSettings

REPO = Path(__file__).resolve().parents[2]

MPI_ENV = {
    "OMPI_MCA_btl": "self,tcp",
    "OMPI_MCA_btl_tcp_if_include": "lo",
    "OMPI_ALLOW_RUN_AS_ROOT": "1",
    "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
    "OMP_NUM_THREADS": "1",
}

# Odd shapes on purpose: 9 layers (not divisible by 2 or 4), head size 5, sequences of 5.
ODD_MODEL = {"n_layer": 9, "n_head": 3, "n_embd": 15, "vocab_size": 50, "seq_len": 5}
TRAIN: dict[str, Any] = {"steps": 10, "lr": 1.0e-3, "lr_schedule": "cosine", "warmup_steps": 3,
                         "min_lr": 1.0e-4, "weight_decay": 0.1, "grad_clip": 1.0, "seed": 7}


def train_settings(total_steps: int | None = None) -> TrainSettings:
    """The PyTorch reference's settings of TRAIN (cosine schedule), over total_steps (default:
    TRAIN's steps)."""
    from launcher.reference.gpt2_torch import TrainSettings

    t: dict[str, Any] = TRAIN
    return TrainSettings(max_lr=t["lr"], min_lr=t["min_lr"], warmup_steps=t["warmup_steps"],
                         total_steps=t["steps"] if total_steps is None else total_steps,
                         cosine=True, weight_decay=t["weight_decay"], grad_clip=t["grad_clip"])


def write_job(directory: Path, name: str, *, pp: int, dp: int, schedule: str, m: int = 4,
              v: int = 1, batch: int = 2, model: dict[str, int] | None = None,
              train: dict[str, Any] | None = None,
              checkpoint: dict[str, Any] | None = None) -> Path:
    body: dict[str, Any] = {
        "name": name,
        "model": model or ODD_MODEL,
        "parallelism": {"pp": pp, "dp": dp, "schedule": schedule, "micro_batches": m,
                        "micro_batch_size": batch, "virtual_stages": v},
        "train": {**TRAIN, **(train or {})},
    }
    if checkpoint:
        body["checkpoint"] = checkpoint
    path = directory / f"{name}.yaml"
    path.write_text(yaml.safe_dump(body))
    return path


def gantry_train(job: Path, ranks: int, lib: Path, *extra: str,
                 run_dir: Path | None = None, env: dict[str, str] | None = None,
                 node_names: list[str] | None = None) -> subprocess.CompletedProcess[str]:
    """`gantry train` under mpirun with `ranks` processes (or alone when ranks == 1), with
    `env` added to the environment; `node_names` (one per rank) emulates nodes: rank i gets
    GANTRY_NODE_NAME=node_names[i] (one mpirun app context per run of equal names)."""
    cmd = [sys.executable, "-m", "launcher", "train", str(job), "--lib", str(lib), *extra]
    if run_dir is not None:
        cmd += ["--run-dir", str(run_dir)]
    if node_names is not None:
        assert len(node_names) == ranks
        runs: list[list[Any]] = []  # [name, count] of consecutive ranks on one node
        for name in node_names:
            if runs and runs[-1][0] == name:
                runs[-1][1] += 1
            else:
                runs.append([name, 1])
        contexts: list[str] = []
        for name, count in runs:
            contexts += [":"] if contexts else []
            contexts += ["-np", str(count), "-x", f"GANTRY_NODE_NAME={name}", *cmd]
        cmd = ["mpirun", "--oversubscribe", *contexts]
    elif ranks > 1:
        cmd = ["mpirun", "--oversubscribe", "-np", str(ranks), *cmd]
    path = os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH", "")]))
    env = {**os.environ, **MPI_ENV, **(env or {}), "PYTHONPATH": path}
    return subprocess.run(cmd, capture_output=True, text=True, check=False, env=env,
                          cwd=REPO, timeout=300)


def train_job(tmp_path: Path, lib: Path, name: str, *, pp: int, dp: int, schedule: str, m: int,
              v: int = 1, train: dict[str, Any] | None = None, env: dict[str, str] | None = None,
              node_names: list[str] | None = None) -> list[dict[str, Any]]:
    """Writes job `name` (ODD_MODEL, TRAIN updated by `train`), trains it with `gantry_train`
    (run directory tmp_path / name), checks that it exited 0 having logged every step, and
    returns metrics.jsonl's records."""
    job = write_job(tmp_path, name, pp=pp, dp=dp, schedule=schedule, m=m, v=v, train=train)
    run_dir = tmp_path / name
    result = gantry_train(job, pp * dp, lib, run_dir=run_dir, env=env, node_names=node_names)
    assert result.returncode == 0, result.stderr[-3000:]
    records = read_metrics(run_dir)
    steps = int({**TRAIN, **(train or {})}["steps"])
    assert [r["step"] for r in records] == list(range(1, steps + 1))
    return records


def read_metrics(run_dir: Path) -> list[dict[str, Any]]:
    lines = (run_dir / "metrics.jsonl").read_text().splitlines()
    return [json.loads(line) for line in lines]


def reference_losses(n_micro: int, batch: int, weights: Path, settings: Any,
                     seed: int) -> list[float]:
    """PyTorch GPT-2 (ODD_MODEL, weights written to `weights`) trained with `settings`
    (a reference.gpt2_torch.TrainSettings) on the global batches gantry train draws with
    `seed`: n_micro micro-batches of `batch` sequences per step, settings.total_steps steps."""
    import torch

    from launcher.native.model_config import GPTConfig
    from launcher.reference.gpt2_torch import make_model, save_weights, train
    from launcher.train.data import global_batch

    cfg = GPTConfig(ODD_MODEL["vocab_size"], ODD_MODEL["seq_len"], ODD_MODEL["n_layer"],
                    ODD_MODEL["n_head"], ODD_MODEL["n_embd"])
    torch.manual_seed(0)
    model = make_model(cfg, seed=11, randomize_all=True)
    save_weights(model, weights)
    batches = []
    for step in range(settings.total_steps):
        inputs, targets = global_batch(step, n_micro, batch, cfg.max_seq_len, cfg.vocab_size,
                                       seed)
        batches.append((torch.from_numpy(inputs.reshape(-1, cfg.max_seq_len)).long(),
                        torch.from_numpy(targets.reshape(-1, cfg.max_seq_len)).long()))
    return [loss for loss, _ in train(model, batches, settings)]
