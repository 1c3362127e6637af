"""The native library's ``GANTRY_*`` runtime switches: the Python mirror of the switch table in
``native/src/runtime_config.c`` (name, kind, default, what is allowed) with a description per
switch, and :func:`recorded`, the values a run starts with (its start event lists them).

``SWITCHES`` is the one list the environment reference of the docs is generated from;
``tests/unit/test_runtime_config.py`` parses the C table and fails when the two disagree.
"""

from __future__ import annotations

import ctypes
from dataclasses import dataclass
from typing import Any

DESCRIBE_BYTES = 4096
"""Buffer for ``gt_runtime_config_describe`` (one short line per switch)."""


@dataclass(frozen=True)
class Switch:
    """One switch: ``kind`` is flag (0/1), int (``lo``..``hi``), choice (``choices``) or mb (a
    number of MB, ``lo``..``hi``); ``default`` as the library records it."""

    name: str
    kind: str
    default: str
    doc: str
    lo: int = 0
    hi: int = 1
    choices: tuple[str, ...] = ()

    @property
    def allowed(self) -> str:
        """What the library accepts, in words."""
        if self.kind == "flag":
            return "0, 1"
        if self.kind == "choice":
            return ", ".join(self.choices)
        if self.kind == "mb":
            return f"a number of MB, {self.lo} to {self.hi}"
        return f"an integer {self.lo}..{self.hi}"


SWITCHES: tuple[Switch, ...] = (
    Switch("GANTRY_ATTENTION", "choice", "auto",
           "CUDA attention: auto = cuDNN flash attention where the build has it and cuDNN "
           "takes the shape, else the reference kernels; cudnn = cuDNN or fail; reference = "
           "the reference kernels", choices=("auto", "cudnn", "reference")),
    Switch("GANTRY_ATTN_AUTOTUNE", "flag", "1",
           "time every cuDNN attention plan once per shape and keep the fastest (0: cuDNN's "
           "heuristic choice)"),
    Switch("GANTRY_BIAS_GEMM", "flag", "1",
           "the c_attn / c_fc bias gradients computed by their weight-gradient products "
           "(0: a column-sum pass each)"),
    Switch("GANTRY_CE_FUSED", "flag", "1",
           "the loss and its logit gradients in one pass, scaled by the head's products "
           "(0: a separate cross-entropy backward)"),
    Switch("GANTRY_CUDA_GRAPHS", "flag", "1",
           "replay each activation slot's actions as captured CUDA graphs (0: eager launches)"),
    Switch("GANTRY_DP_BUCKET_MB", "mb", "25",
           "bucket size of the overlapped data-parallel all-reduce (0: one bucket per layer)",
           lo=0, hi=1048576),
    Switch("GANTRY_DP_MAX_CTAS", "int", "8",
           "CTA cap of the overlapped data-parallel communicator (0: NCCL's default)",
           lo=0, hi=64),
    Switch("GANTRY_DP_OVERLAP", "flag", "1",
           "all-reduce the data-parallel gradients in buckets during the last backward "
           "(0: after it)"),
    Switch("GANTRY_GEMM_AUTOTUNE", "flag", "1",
           "time cuBLASLt's candidate algorithms once per shape and keep the fastest "
           "(0: its first choice)"),
    Switch("GANTRY_GEMM_CANDIDATES", "int", "8",
           "how many cuBLASLt candidates autotuning times", lo=1, hi=32),
    Switch("GANTRY_GEMM_TUNE_LOG", "flag", "0",
           "one gantry-gemm-tune JSON line on stderr per tuned product shape"),
    Switch("GANTRY_GRAD_OVERWRITE", "flag", "1",
           "after a gradient restart the first weight products overwrite their tensors "
           "(0: zero them, then accumulate)"),
    Switch("GANTRY_LN_BIAS_SUMS", "flag", "1",
           "LayerNorm 2's backward also sums the bias gradients of the two products around it"),
    Switch("GANTRY_NORM_CAPTURE", "int", "1",
           "1 = the global gradient norm from the overlapped AdamW ranges, 0 = a pass of its "
           "own", lo=0, hi=1),
    Switch("GANTRY_OPT_OVERLAP", "int", "2",
           "AdamW per gradient range during the backward when clipping is off: 1 = every "
           "rank, 2 = pipeline rank 0 only, 3 = rank 0 and the other ranks' chunks but the "
           "last finished, 0 = none", lo=0, hi=3),
    Switch("GANTRY_P2P_CE_SLOTS", "int", "4",
           "ring slots of a copy-engine pipeline edge", lo=1, hi=64),
    Switch("GANTRY_P2P_MAX_CTAS", "int", "4",
           "CTA cap of the pipeline edges' NCCL communicators (0: NCCL's default)",
           lo=0, hi=64),
    Switch("GANTRY_P2P_TRANSPORT", "choice", "auto",
           "pipeline edges: auto = copy engines between GPUs of one node that reach each "
           "other, else NCCL; ce = copy engines or fail; nccl = NCCL",
           choices=("auto", "ce", "nccl")),
    Switch("GANTRY_PROFILE_OPS", "choice", "0",
           "per-operation GPU times on stderr when a stage is freed (prefill: a spin kernel "
           "ahead of each action keeps the queue full)", choices=("0", "1", "prefill")),
    Switch("GANTRY_RESID_LN", "flag", "1",
           "the projections' residual adds in the LayerNorm pass after them (0: in the "
           "products' epilogue)"),
)


def recorded(lib: Any) -> dict[str, str]:
    """Every switch with the value the library reads now (``gt_runtime_config_describe`` of
    the loaded :class:`~launcher.native.binding.NativeLibrary`); a bad value raises its
    ``UserInputError``."""
    buf = ctypes.create_string_buffer(DESCRIBE_BYTES)
    lib.check(lib.lib.gt_runtime_config_describe(buf, DESCRIBE_BYTES))
    pairs = (line.split("=", 1) for line in buf.value.decode().splitlines())
    return {name: value for name, value in pairs}
