"""Benchmark: `gantry demo` end to end on a private embedded cluster, against the bare trainer.

    python bench/bench_demo.py [--runs N] [--steps 60]

Each run starts nothing but what the demo starts (a private cluster on free ports, brought
up once for all runs and torn down at the end) and reads the demo's --json: wall time per demo
step (cluster, build, data, fault drill, submit + follow, report) and the job's phases from
its log (queued, preflight, gate, training). Anchor measured in the same run: the same job
spec trained by `mpirun -np 4 gantry train` outside Slurm (no sbatch, no preflight, no srun),
i.e. what the launcher's whole path costs on top of training. Prints one JSON object.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from launcher.build import build_site  # noqa: E402
from launcher.site_config import load_site  # noqa: E402
from tests.embedded_cluster import start_embedded_cluster  # noqa: E402

MPI_ENV = {"OMPI_MCA_btl": "self,tcp", "OMPI_MCA_btl_tcp_if_include": "lo",
           "OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
           "OMP_NUM_THREADS": "1"}


def anchor(job_path: Path, site_path: Path, work: Path) -> float:
    """Wall time of `mpirun -np 4 gantry train` on the demo's job spec (same data, steps)."""
    spec = yaml.safe_load(job_path.read_text())
    spec["env"] = {}
    spec.pop("checkpoint", None)
    bare = work / "bare.yaml"
    bare.write_text(yaml.safe_dump(spec))
    library = build_site(load_site(site_path)).library
    env = {**os.environ, **MPI_ENV, "PYTHONPATH": str(REPO)}
    start = time.perf_counter()
    done = subprocess.run(["mpirun", "--oversubscribe", "-np", "4", sys.executable, "-m",
                           "launcher", "train", str(bare), "--lib", str(library),
                           "--run-dir", str(work / "bare-run")],
                          capture_output=True, text=True, env=env, cwd=REPO, check=False)
    took = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"anchor failed: {done.stderr[-2000:]}")
    return took


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--steps", type=int, default=60)
    args = parser.parse_args()
    rows: list[dict[str, Any]] = []
    anchors: list[float] = []
    with start_embedded_cluster() as cluster, tempfile.TemporaryDirectory() as tmp:
        for index in range(args.runs):
            work = Path(tmp) / f"run{index}"
            start = time.perf_counter()
            done = subprocess.run(
                [sys.executable, "-m", "launcher", "demo", "--site", str(cluster.site_path),
                 "--work-dir", str(work), "--steps", str(args.steps), "--json"],
                capture_output=True, text=True, env=cluster.env, cwd=REPO, check=False)
            wall = time.perf_counter() - start
            if done.returncode != 0:
                raise SystemExit(f"demo failed: {done.stderr[-3000:]}")
            result = json.loads(done.stdout)
            rows.append({"wall_s": round(wall, 2), "demo_steps_s": result["seconds"],
                         "job_phases_s": result["summary"]["phases_s"]})
            job_path = next(work.glob("run-*/gpt2-demo.yaml"))
            anchors.append(anchor(job_path, cluster.site_path, work))
    train = [r["demo_steps_s"]["train"] for r in rows]
    out = {
        "date": time.strftime("%Y-%m-%d"), "machine": platform.node(),
        "cpus": os.cpu_count(), "python": platform.python_version(),
        "slurm": subprocess.run(["slurmd", "-V"], capture_output=True, text=True,
                                check=False).stdout.strip(),
        "steps": args.steps, "runs": rows,
        "median_demo_wall_s": round(statistics.median(r["wall_s"] for r in rows), 2),
        "median_submit_follow_s": round(statistics.median(train), 2),
        "median_anchor_bare_mpirun_train_s": round(statistics.median(anchors), 2),
    }
    print(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
