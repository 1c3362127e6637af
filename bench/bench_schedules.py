"""Benchmark: generation time of every schedule table at pp in {8, 16, 64} and m in {64, 512}
(target: each under 1 s), and the time a later start of the same job takes to read the table
back from the job directory's cache instead.

Run from the repository root:  python bench/bench_schedules.py [--limit-s 120] [--out FILE]
Each layout runs in its own process (so zb-interleaved's in-process memo never helps), once
cold: ``generate(name, pp, m, v)`` plus ``to_bytes()``, what world rank 0 does on a job's
first start; then ``table_bytes`` from the cache file the first run wrote (digest checked,
blob parsed), what every later start does. The chunked schedules use v = 2. A layout still
running after ``--limit-s`` is stopped and recorded as such. Prints a markdown table; with
``--out`` the raw rows go to a JSON file as well.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from launcher.schedules import CHUNKED, SCHEDULES, ScheduleError

PPS = (8, 16, 64)
MS = (64, 512)


def one(name: str, pp: int, m: int, v: int) -> dict[str, Any]:
    """Cold generation, then the cached read, of one layout (in this process)."""
    from launcher.train import schedule_cache

    row: dict[str, Any] = {"schedule": name, "pp": pp, "m": m, "v": v}
    with tempfile.TemporaryDirectory() as job_dir:
        start = time.perf_counter()
        try:
            blob = schedule_cache.table_bytes(name, pp, m, v, Path(job_dir))
        except ScheduleError as err:
            row["error"] = str(err)
            return row
        row["generate_s"] = time.perf_counter() - start
        start = time.perf_counter()
        again = schedule_cache.table_bytes(name, pp, m, v, Path(job_dir))
        row["cached_s"] = time.perf_counter() - start
        assert again == blob
        row["actions"] = sum(schedule_cache.load(blob, name).rows[r].shape[0]
                             for r in range(pp))
        row["bytes"] = len(blob)
    return row


def run(name: str, pp: int, m: int, v: int, limit_s: float) -> dict[str, Any]:
    cmd = [sys.executable, __file__, "--case", f"{name}:{pp}:{m}:{v}"]
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=limit_s,
                              check=True)
    except subprocess.TimeoutExpired:
        return {"schedule": name, "pp": pp, "m": m, "v": v, "stopped_after_s": limit_s}
    return dict(json.loads(done.stdout))


def cell(row: dict[str, Any], key: str) -> str:
    if "error" in row:
        return "n/a"
    if "stopped_after_s" in row:
        return f"> {row['stopped_after_s']:.0f} s" if key == "generate_s" else "-"
    value = float(row[key])
    return f"{value * 1e3:.0f} ms" if value < 1 else f"{value:.2f} s"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--case", help=argparse.SUPPRESS)
    parser.add_argument("--limit-s", type=float, default=120.0)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    if args.case:
        name, pp, m, v = args.case.split(":")
        print(json.dumps(one(name, int(pp), int(m), int(v))))
        return 0
    rows = []
    for pp in PPS:
        for m in MS:
            for name in SCHEDULES:
                v = 2 if name in CHUNKED else 1
                row = run(name, pp, m, v, args.limit_s)
                rows.append(row)
                print(json.dumps(row), file=sys.stderr, flush=True)
    print(f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores, "
          f"Python {platform.python_version()}")
    print("| schedule | v | pp | m | actions | generate (first start) | from cache (restart) |")
    print("|---|---|---|---|---|---|---|")
    for row in rows:
        print(f"| {row['schedule']} | {row['v']} | {row['pp']} | {row['m']} | "
              f"{row.get('actions', '-')} | {cell(row, 'generate_s')} | "
              f"{cell(row, 'cached_s')} |")
    if args.out:
        args.out.write_text(json.dumps(rows, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
