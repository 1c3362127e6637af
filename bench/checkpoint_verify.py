"""Benchmark: verifying a checkpoint shard, whole-file sha256 (the older manifests' digest, one
core) against the piecewise checksum (launcher/train/piece_hash.py: pieces read and hashed by
a thread pool). Writes a file of --bytes float32 values, then times each, alternating, with the
page cache warm. The whole-file sha256 is the anchor, measured in the same run.

Usage: python bench/checkpoint_verify.py [--bytes 4258600000] [--repeat 2] [--dir /tmp]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from launcher.train.checkpoint import sha256_of
from launcher.train.piece_hash import file_digest


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--bytes", type=int, default=4_258_600_000,
                        help="file size (default: a 350M stage's shard)")
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--dir", type=Path, default=Path(tempfile.gettempdir()))
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        path = Path(tmp) / "shard.bin"
        np.arange(args.bytes // 4, dtype=np.float32).tofile(path)
        size = path.stat().st_size / 1e9
        print("| digest | seconds | GB/s |")
        print("|---|---|---|")
        for _ in range(args.repeat):
            for name, digest in (("whole-file sha256 (anchor)", sha256_of),
                                 ("pieces, thread pool", file_digest)):
                start = time.perf_counter()
                digest(path)
                seconds = time.perf_counter() - start
                print(f"| {name} | {seconds:.2f} | {size / seconds:.2f} |", flush=True)


if __name__ == "__main__":
    main()
