"""The short training run the sbatch tests submit (test_train_sbatch, test_gpu_site_cluster):
steps, seed, the PyTorch reference's settings and the job's `train` section, kept equal."""

from __future__ import annotations

from typing import Any

from launcher.reference.gpt2_torch import TrainSettings

STEPS = 6
SEED = 7
SETTINGS = TrainSettings(max_lr=1.0e-3, min_lr=1.0e-4, warmup_steps=3, total_steps=STEPS,
                         cosine=True, weight_decay=0.1, grad_clip=1.0)
TRAIN: dict[str, Any] = {
    "steps": STEPS, "lr": SETTINGS.max_lr, "lr_schedule": "cosine",
    "warmup_steps": SETTINGS.warmup_steps, "min_lr": SETTINGS.min_lr,
    "weight_decay": SETTINGS.weight_decay, "grad_clip": SETTINGS.grad_clip, "seed": SEED}
