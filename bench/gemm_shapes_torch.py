"""gemm_shapes_torch.py — time PyTorch's matrix product on the shapes gantry's cuBLASLt tuner saw.

Reads the `gantry-gemm-tune {json}` lines that `GANTRY_GEMM_TUNE_LOG=1` makes the CUDA stage
print (one per tuned shape: column-major m, n, k, transposes, epilogue, output type, every
candidate's time) from the given logs, times `torch.matmul` on bf16 operands of the same
column-major shape and transposes (fp32 output via `out_dtype` where gantry accumulates weight
gradients in fp32, when this torch supports it), and prints one JSON line per shape:

    {"m": .., "n": .., "k": .., ..., "gantry_ms": best candidate, "gantry_heuristic_ms":
     candidate 0, "gantry_tflops": .., "torch_ms": .., "torch_tflops": ..}

so a slow shape shows whether the tuner or the library is behind. Needs a CUDA GPU.

    python3 bench/gemm_shapes_torch.py LOG [LOG...]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

PREFIX = "gantry-gemm-tune "
REPS = 20


def read_shapes(paths: list[Path]) -> list[dict[str, Any]]:
    """The distinct tuned shapes of the logs, in first-seen order."""
    seen: dict[str, dict[str, Any]] = {}
    for path in paths:
        for line in path.read_text(errors="replace").splitlines():
            if not line.startswith(PREFIX):
                continue
            record = json.loads(line[len(PREFIX):])
            key = json.dumps({k: v for k, v in record.items() if k not in ("ms", "best", "tflops")},
                             sort_keys=True)
            seen.setdefault(key, record)
    return list(seen.values())


def time_torch(record: dict[str, Any]) -> float:
    """Mean ms of torch.matmul on the record's column-major product (bf16 in)."""
    import torch

    m, n, k = record["m"], record["n"], record["k"]
    batch = max(1, record["batch"])
    # column-major D (m, n) = op(A) (m, k) @ op(B) (k, n) is row-major D^T (n, m) =
    # op(B)^T (n, k) @ op(A)^T (k, m); a transposed operand is a transposed view
    dev = torch.device("cuda")
    bt = (torch.randn(batch, k, n, device=dev, dtype=torch.bfloat16).transpose(1, 2)
          if not record["transb"] else torch.randn(batch, n, k, device=dev, dtype=torch.bfloat16))
    at = (torch.randn(batch, m, k, device=dev, dtype=torch.bfloat16).transpose(1, 2)
          if not record["transa"] else torch.randn(batch, k, m, device=dev, dtype=torch.bfloat16))
    if batch == 1:
        bt, at = bt[0], at[0]

    def product() -> Any:
        if record["d_fp32"]:
            try:
                return torch.matmul(bt, at, out_dtype=torch.float32)  # type: ignore[call-arg]
            except TypeError:
                return torch.matmul(bt, at)
        return torch.matmul(bt, at)

    for _ in range(3):
        product()
    start = torch.cuda.Event(enable_timing=True)  # type: ignore[no-untyped-call]
    end = torch.cuda.Event(enable_timing=True)  # type: ignore[no-untyped-call]
    start.record()
    for _ in range(REPS):
        product()
    end.record()
    end.synchronize()
    return float(start.elapsed_time(end)) / REPS


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("logs", nargs="+", type=Path)
    args = parser.parse_args(argv)
    for record in read_shapes(args.logs):
        flop = 2.0 * record["m"] * record["n"] * record["k"] * max(1, record["batch"])
        ms = [t for t in record["ms"] if t > 0]
        best = min(ms) if ms else 0.0
        torch_ms = time_torch(record)
        row = {k: v for k, v in record.items() if k not in ("ms", "tflops")}
        row.update({
            "candidates": len(record["ms"]),
            "gantry_ms": round(best, 4),
            "gantry_heuristic_ms": round(record["ms"][0], 4) if record["ms"] else None,
            "gantry_tflops": round(flop / best / 1e9, 1) if best else None,
            "torch_ms": round(torch_ms, 4),
            "torch_tflops": round(flop / torch_ms / 1e9, 1),
        })
        print(json.dumps(row), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
