"""Benchmark: reading a long run's goodput history, whole vs incremental (what the run monitor
does after every sample), at 10,000 and 100,000 step records.

Run from the repository root:  python bench/bench_goodput_read.py [--runs 5] [--out FILE]
Per size a job directory is built in a temp dir: meta.json, the Slurm log (the script's lines
and the trainer's line per step), events.jsonl (a start, a checkpoint every 1,000 steps) and
metrics.jsonl with records of {"step", "loss", "lr", "grad_norm", "tokens", "step_s",
"tokens_per_s", "time", "checkpoint_s", "mem_gb"}. Measured, median of ``--runs``:

- anchor: a bare loop of ``json.loads`` over the metrics.jsonl lines (read beforehand);
- ``read_job_times`` without a cache (``gantry status``, ``gantry report``);
- ``read_job_times`` with a primed ReadCache after 30 new steps were appended (metrics and
  log lines; each run appends 30 more);
- ``breakdown`` (the per-step chain) of that result, with ``to_json``;
- ``write_textfiles`` of rank 0's node and of another node, each with its own primed cache,
  after 30 new steps (a monitor's rewrite);
- the cache's memory after the first read (tracemalloc, a separate pass).

Prints a markdown table; with ``--out`` the rows go to a JSON file as well.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import time
import tracemalloc
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from launcher.job_dir import (
    EVENTS_FILE,
    LAUNCH_NODES_FILE,
    LOGS_DIR,
    META_FILE,
    METRICS_FILE,
    RANKS_DIR,
    RUNS_DIR,
    log_file_name,
)
from launcher.report.goodput import breakdown
from launcher.report.job_times import read_job_times
from launcher.report.read_cache import ReadCache
from launcher.report.textfile import write_textfiles

JOB = "7"
T0 = 1_796_288_400.0
SIZES = (10_000, 100_000)
NEW = 30


def stamp(t: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(int(t))) + ".000Z"


class Run:
    """A job directory that a run appends to."""

    def __init__(self, root: Path, steps: int) -> None:
        self.path = root / "job"
        self.run = self.path / RUNS_DIR / "job"
        attempt = self.path / RUNS_DIR / f"{JOB}-0"
        (attempt / RANKS_DIR).mkdir(parents=True)
        self.run.mkdir()
        (self.path / LOGS_DIR).mkdir()
        (self.path / META_FILE).write_text(json.dumps({
            "name": "job", "job_id": JOB, "submitted_at": T0,
            "last_state": {"state": "RUNNING", "terminal": False}}))
        for rank, node in enumerate(("n1", "n2")):
            (attempt / RANKS_DIR / f"{rank}.start").write_text(json.dumps(
                {"rank": rank, "node": node, "pid": 1, "time": T0 + 11}))
        (attempt / LAUNCH_NODES_FILE).write_text("n1,n2\n")
        self.log = self.path / LOGS_DIR / log_file_name(JOB)
        self.log.write_text(f"[gantry {stamp(T0 + 10)}] job {JOB} (restart 0 of at most 3) on "
                            f"n[1-2]\n[gantry {stamp(T0 + 11)}] launching pp=2 x dp=1 on "
                            "n1,n2\n")
        (self.run / EVENTS_FILE).write_text(json.dumps(
            {"event": "start", "time": T0 + 20, "step": 0}) + "\n")
        self.steps = 0
        self.append(steps)

    def append(self, count: int) -> None:
        metrics, log, events = [], [], []
        for _ in range(count):
            self.steps += 1
            step = self.steps
            metrics.append(json.dumps({
                "step": step, "loss": 5.0 - step * 1e-5, "lr": 3e-4, "grad_norm": 1.0,
                "tokens": 524288, "step_s": 0.98, "tokens_per_s": 534987.2,
                "time": T0 + 20 + step, "checkpoint_s": 0.5 if step % 1000 == 1 else 0.0,
                "mem_gb": 71.5}, sort_keys=True) + "\n")
            log.append(f"step {step}/1000000 loss 4.123456 norm 1.0000 lr 3.000e-04\n")
            if step % 1000 == 0:
                events.append(json.dumps({"event": "checkpoint", "time": T0 + 20.5 + step,
                                          "step": step}) + "\n")
        for path, lines in ((self.run / METRICS_FILE, metrics), (self.log, log),
                            (self.run / EVENTS_FILE, events)):
            with open(path, "a", encoding="utf-8") as handle:
                handle.write("".join(lines))


def median_s(runs: int, once: Callable[[], float]) -> float:
    return statistics.median(once() for _ in range(runs))


def timed(action: Callable[[], object]) -> float:
    start = time.perf_counter()
    action()
    return time.perf_counter() - start


def measure(steps: int, runs: int) -> dict[str, Any]:
    row: dict[str, Any] = {"steps": steps}
    with tempfile.TemporaryDirectory() as root:
        job = Run(Path(root), steps)
        out = Path(root) / "prom"
        out.mkdir()
        row["metrics_bytes"] = (job.run / METRICS_FILE).stat().st_size
        lines = (job.run / METRICS_FILE).read_text(encoding="utf-8").splitlines()

        def anchor() -> float:
            return timed(lambda: [json.loads(line) for line in lines])

        row["anchor_json_loads_s"] = median_s(runs, anchor)
        row["full_read_s"] = median_s(runs, lambda: timed(lambda: read_job_times(job.path)))
        cache = ReadCache()
        read_job_times(job.path, cache=cache)

        def incremental() -> float:
            job.append(NEW)
            return timed(lambda: read_job_times(job.path, cache=cache))

        row["incremental_read_s"] = median_s(runs, incremental)
        times = read_job_times(job.path, cache=cache)
        now = T0 + 30 + job.steps
        row["breakdown_s"] = median_s(runs, lambda: timed(
            lambda: breakdown(times, now).to_json()))
        for node, key in (("n1", "rewrite_rank0_node_s"), ("n2", "rewrite_other_node_s")):
            mine = ReadCache()
            write_textfiles(job.path, out, [node], cache=mine)

            def rewrite(node: str = node, mine: ReadCache = mine) -> float:
                job.append(NEW)
                return timed(lambda: write_textfiles(job.path, out, [node], cache=mine))

            row[key] = median_s(runs, rewrite)
        tracemalloc.start()
        fresh = ReadCache()
        read_job_times(job.path, cache=fresh)
        row["cache_bytes"] = tracemalloc.get_traced_memory()[0]
        tracemalloc.stop()
        assert read_job_times(job.path, cache=cache) == read_job_times(job.path)
    return row


def ms(seconds: float) -> str:
    return f"{seconds * 1e3:.1f} ms" if seconds < 10 else f"{seconds:.1f} s"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    rows = [measure(steps, args.runs) for steps in SIZES]
    load = os.getloadavg()[0]
    print(f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores, "
          f"load {load:.2f}, Python {platform.python_version()}; median of {args.runs}")
    print("| steps | metrics.jsonl | anchor: json.loads loop | read_job_times, whole | "
          f"with cache, +{NEW} steps | breakdown + to_json | rewrite, rank 0's node | "
          "rewrite, other node | cache memory |")
    print("|---|---|---|---|---|---|---|---|---|")
    for row in rows:
        print(f"| {row['steps']:,} | {row['metrics_bytes'] / 1e6:.1f} MB | "
              f"{ms(row['anchor_json_loads_s'])} | {ms(row['full_read_s'])} | "
              f"{ms(row['incremental_read_s'])} | {ms(row['breakdown_s'])} | "
              f"{ms(row['rewrite_rank0_node_s'])} | {ms(row['rewrite_other_node_s'])} | "
              f"{row['cache_bytes'] / 1e6:.1f} MB |")
    if args.out:
        args.out.write_text(json.dumps({"load": load, "python": platform.python_version(),
                                        "runs": args.runs, "rows": rows}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
