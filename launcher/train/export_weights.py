"""One model file from a checkpoint: the parameters of every stage shard (no AdamW moments)
merged into a single safetensors file under the Hugging Face GPT-2 names, the output head
left tied to ``transformer.wte.weight`` (the last stage's ``lm_head.weight`` copy is dropped
after checking it is identical). The checkpoint is verified first. The file loads into PyTorch
(launcher.reference.gpt2_torch.load_weights) or HF's GPT2LMHeadModel, and serves as
``train.init_weights`` of a job with any other pipeline layout (without the moments)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
from safetensors import SafetensorError, safe_open

from launcher.atomic_write import FileExists, WriteError, open_atomic
from launcher.errors import UserInputError
from launcher.train import checkpoint
from launcher.train.safetensors_stream import write_safetensors

_MOMENTS = ("exp_avg.", "exp_avg_sq.")
WTE, LM_HEAD = "transformer.wte.weight", "lm_head.weight"


@dataclass(frozen=True)
class ExportResult:
    out: Path
    step: int
    tensors: int
    bytes: int
    head_max_diff: float | None
    """Largest |lm_head - wte| of the tied copies: 0.0, or None when only wte was there."""

    def to_json(self) -> dict[str, Any]:
        return {**self.__dict__, "out": str(self.out)}


def _params_of(shard: Path) -> dict[str, npt.NDArray[Any]]:
    """The shard's parameters (its moments are not read)."""
    try:
        with safe_open(str(shard), "np") as handle:
            return {name: handle.get_tensor(name) for name in handle.keys()  # noqa: SIM118
                    if not name.startswith(_MOMENTS)}
    except (SafetensorError, OSError, ValueError) as err:
        raise UserInputError(f"{shard}: unreadable checkpoint shard ({err})") from None


def _write_new(out: Path, tensors: dict[str, npt.NDArray[Any]], metadata: dict[str, str]) -> None:
    """Writes a file that must not exist yet (launcher/atomic_write.py with overwrite=False:
    linked into place, which fails if ``out`` appeared meanwhile). The temp file goes on
    every path out, Ctrl-C included."""
    try:
        with open_atomic(out, overwrite=False) as handle:
            write_safetensors(handle, tensors, metadata)
    except FileExists:
        raise UserInputError(f"{out}: already exists (remove it or choose another path)"
                             ) from None
    except WriteError as err:
        raise UserInputError(f"{out}: cannot write the exported weights ({err.reason})"
                             ) from None


def export_weights(directory: Path, out: Path) -> ExportResult:
    """Verifies the checkpoint in ``directory`` and writes its parameters to ``out``, which
    must not exist. A head copy that differs from wte (the trainer keeps them bit-identical)
    means a broken checkpoint and is refused."""
    if out.exists():
        raise UserInputError(f"{out}: already exists (remove it or choose another path)")
    if not out.parent.is_dir():
        raise UserInputError(f"{out.parent}: no such directory for the exported weights")
    step = checkpoint.verify(directory, None)
    merged: dict[str, npt.NDArray[Any]] = {}
    head: npt.NDArray[Any] | None = None
    for shard in sorted(directory.glob("stage_*.safetensors")):
        for name, value in _params_of(shard).items():
            if name == LM_HEAD:
                head = value
            elif name in merged:
                raise UserInputError(f"{shard}: tensor {name!r} is also in an earlier shard")
            else:
                merged[name] = value
    if WTE not in merged:
        raise UserInputError(f"{directory}: no stage holds {WTE!r} (not a gantry checkpoint?)")
    diff = None
    if head is not None:
        if head.shape != merged[WTE].shape:
            raise UserInputError(f"{directory}: {LM_HEAD!r} is {list(head.shape)}, "
                                 f"{WTE!r} {list(merged[WTE].shape)}")
        diff = float(np.max(np.abs(head - merged[WTE]))) if head.size else 0.0
        if diff != 0.0:
            raise UserInputError(f"{directory}: the tied {LM_HEAD!r} differs from {WTE!r} by "
                                 f"up to {diff:.3g} (the trainer keeps them identical: a "
                                 "broken checkpoint)")
    _write_new(out, merged, {"format": "pt", "step": str(step), "source": str(directory)})
    return ExportResult(out, step, len(merged), out.stat().st_size, diff)
