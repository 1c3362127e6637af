"""The demo's job spec: a small GPT-2 (byte tokenizer) with pp 2 x dp 2 (1F1B) on 4 nodes + 1
spare, trained on the repository's docs, with the fault drill in its environment."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from launcher.data.byte_tokenizer import VOCAB_SIZE

NAME = "gpt2-demo"


def demo_job(data_glob: str, sysfs_root: Path, state_dir: Path, steps: int) -> dict[str, Any]:
    """The job mapping (written to YAML and submitted with `gantry submit`)."""
    return {
        "name": NAME,
        "model": {"n_layer": 4, "n_head": 4, "n_embd": 64, "vocab_size": VOCAB_SIZE,
                  "seq_len": 64},
        "parallelism": {"pp": 2, "dp": 2, "schedule": "1f1b", "micro_batches": 4,
                        "micro_batch_size": 2},
        "train": {"steps": steps, "lr": 1.5e-3, "lr_schedule": "cosine",
                  "warmup_steps": min(5, steps), "min_lr": 3.0e-4, "seed": 1,
                  "data": data_glob},
        "resources": {"nodes": 4, "spares": 1, "time_limit": "00:10:00"},
        "checkpoint": {"dir": "checkpoints", "interval": max(1, steps // 2), "keep": 2},
        # The embedded cluster's "nodes" share one host's cores: a rank's compute time is the
        # host scheduler's share, 20-50 % apart between same-shape ranks for 20 steps at a
        # time on 2 cores, so the straggler watch would report the scheduler, not a node.
        "policy": {"preflight_level": "quick", "requeue": True, "max_restarts": 1,
                   "hang_timeout_s": 60, "straggler_action": "off"},
        "env": {
            # The fault drill: preflight reads InfiniBand ports from this fake sysfs tree,
            # where one planned node's port is down.
            "GANTRY_SYSFS_ROOT": str(sysfs_root),
            # Preflight's drain history of this demo run only (the drain rate limit and
            # clean-pass counts start fresh).
            "GANTRY_STATE_DIR": str(state_dir),
            "OMP_NUM_THREADS": "1",
        },
    }
