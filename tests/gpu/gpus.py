"""How many GPUs a GPU test needs: skip cleanly (naming the count) where fewer are visible."""

from __future__ import annotations

import pytest


def need_gpus(count: int) -> None:
    """Skips the calling test unless at least `count` CUDA GPUs are visible to torch."""
    import torch

    visible = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if visible < count:
        pytest.skip(f"GPU test: needs {count} CUDA GPUs ({visible} visible)")
