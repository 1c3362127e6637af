"""Benchmark: the gate's fabric test on the embedded cluster, with its anchor in the same run.

    python bench/bench_fabric_gate.py [--nodes 8] [--runs 3] [--slow NODE:SECONDS]

Starts a private embedded cluster, then N times each: ``srun -N<n> --ntasks-per-node=1
--mpi=pmix gantry preflight fabric`` (the step the batch script runs: MPI start-up, the
all-reduce, two rings of timed 1 MiB transfers; wall time of the step) and the anchor, a
bare ``srun -N<n> --ntasks-per-node=1 hostname`` over the same nodes. Each fabric record is
judged with the site's default settings; ``--slow`` injects GANTRY_FAULT_SLOW_FABRIC (the
test-only hook) to time a test that names a slow node. Prints one JSON object.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent


def timed(argv: list[str], env: dict[str, str]) -> tuple[float, subprocess.CompletedProcess[str]]:
    start = time.perf_counter()
    proc = subprocess.run(argv, capture_output=True, text=True, env=env, check=False)
    return time.perf_counter() - start, proc


def stats(times: list[float]) -> dict[str, float]:
    return {"median_s": round(statistics.median(times), 3), "min_s": round(min(times), 3),
            "max_s": round(max(times), 3)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=8)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--slow", default=None, help="GANTRY_FAULT_SLOW_FABRIC value")
    args = parser.parse_args()
    sys.path.insert(0, str(REPO))
    from launcher.preflight.fabric_judge import judge
    from launcher.preflight.fabric_result import result_from_json
    from launcher.site_config import load_site
    from tests.embedded_cluster import start_embedded_cluster

    n = args.nodes
    with start_embedded_cluster() as c:
        env = dict(c.env)
        if args.slow:
            env["GANTRY_FAULT_SLOW_FABRIC"] = args.slow
        cfg = load_site(c.site_path).config.preflight.fabric
        step = ["srun", f"-N{n}", f"--ntasks={n}", "--ntasks-per-node=1", "--mpi=pmix",
                sys.executable, "-m", "launcher", "preflight", "fabric", "--site",
                str(c.site_path)]
        anchor = ["srun", f"-N{n}", "--ntasks-per-node=1", "hostname"]
        fabric_s, inside_s, anchor_s, verdicts = [], [], [], []
        for _ in range(args.runs):
            took, proc = timed(step, env)
            if proc.returncode != 0:
                raise SystemExit(f"fabric step failed ({proc.returncode}): {proc.stderr[-2000:]}")
            record = result_from_json(proc.stdout, "fabric step")
            fabric_s.append(took)
            inside_s.append(record.duration_s)
            verdicts.append(judge(record, cfg))
            anchor_s.append(timed(anchor, env)[0])
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True, cwd=REPO, check=False).stdout.strip()
    load = os.getloadavg()
    result: dict[str, Any] = {
        "bench": "fabric-gate", "nodes": n, "runs": args.runs, "slow": args.slow,
        "bytes": cfg.bytes, "repeats": cfg.repeats,
        "fabric_step": stats(fabric_s), "record_duration": stats(inside_s),
        "anchor_srun_hostname": stats(anchor_s),
        "verdicts": [v.message for v in verdicts],
        "median_link_ms": [round(statistics.median(x.seconds for x in v.links) * 1000, 2)
                           for v in verdicts],
        "machine": f"{platform.node()} ({os.cpu_count()} CPUs, {platform.machine()})",
        "load_1m": round(load[0], 2), "python": platform.python_version(),
        "date": time.strftime("%Y-%m-%d"), "commit": commit,
    }
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
