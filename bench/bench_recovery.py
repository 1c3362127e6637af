"""Benchmark: recovery time after a node is killed mid-run, requeue path vs recovery inside
the allocation, side by side on one embedded cluster.

Run from the repository root:  python bench/bench_recovery.py [--rounds 2] [--out FILE]
One private embedded cluster (8 nodes, SlurmdTimeout 20 s) and the resilience tests' job
(tests/integration/resilience_helpers.py: pp=2 x dp=1 on 2 nodes + 1 spare, 8 steps, a
checkpoint every 2 steps, 1 s per step, watchdog 6 s). First an uninterrupted run (the
trajectory every recovered run must equal bit for bit), then ``--rounds`` rounds of: the
job with ``policy.recover_in_allocation: false`` (today's requeue path: Slurm's node failure,
requeue, a new allocation, `gantry train --resume`) and the same job with the in-allocation
recovery, alternating. In each, kill -9 of rank 1's node (its slurmd, slurmstepd and ranks)
once a checkpoint is complete, after step 3. Recovery time: the kill to the first step
finished after the resume (the resilience tests' measure). Prints a markdown table; with
``--out`` the rows go to a JSON lines file as well.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import yaml

from launcher.job_dir import RECOVERIES_FILE
from launcher.site_config import DEFAULT_SITE
from tests.embedded_cluster import EmbeddedCluster, start_embedded_cluster
from tests.integration.resilience_helpers import (
    gantry,
    job_body,
    kill_node,
    recovery_seconds,
    submit,
    wait_for,
)


def one_run(cluster: EmbeddedCluster, cwd: Path, name: str, in_allocation: bool | None,
            reference: list[tuple[int, float, float]] | None) -> dict[str, Any]:
    """A job; with ``in_allocation`` not None, rank 1's node killed after step 3."""
    body = job_body(name, spares=1, hang_timeout_s=6,
                    env={"GANTRY_FAULT_STEP_DELAY_S": "1"},
                    recover_in_allocation=bool(in_allocation) if in_allocation is not None
                    else True)
    job = submit(cluster, cwd, body)
    started = time.time()
    row: dict[str, Any] = {"path": {None: "uninterrupted", False: "requeue",
                                    True: "in allocation"}[in_allocation]}
    if in_allocation is not None:
        job.wait_step(3)
        wait_for(lambda: any((job.job_dir / "ckpt").glob("step_*/manifest.json")),
                 "a complete checkpoint", 120, job.log)
        victim = job.launch_nodes(0)[1]
        killed_at = time.time()
        if not kill_node(cluster, victim, job.job_id):
            raise RuntimeError(f"nothing to kill on {victim}")
        row["victim"] = victim
    info = job.wait_done(600)
    trajectory = job.trajectory()
    row.update(job_id=job.job_id, state=info["state"], restarts=info["restarts"],
               attempts=info.get("attempts"), wall_s=round(time.time() - started, 2),
               steps=len(trajectory))
    if in_allocation is not None:
        seconds, redone = recovery_seconds(job, killed_at)
        row.update(recovery_s=round(seconds, 2), steps_redone=redone,
                   bit_exact=trajectory == reference)
        lines = job.job_dir / RECOVERIES_FILE
        row["recoveries"] = ([json.loads(x) for x in lines.read_text().splitlines()]
                             if lines.is_file() else [])
    row["trajectory"] = trajectory
    return row


def table(rows: list[dict[str, Any]]) -> str:
    out = ["| path | runs | recovery s (each) | median | same job id, no requeue | "
           "bit-exact | wall s |", "|---|---|---|---|---|---|---|"]
    for path in ("requeue", "in allocation"):
        mine = [r for r in rows if r["path"] == path]
        if not mine:
            continue
        times = [r["recovery_s"] for r in mine]
        kept = all(r["restarts"] == 0 and r["state"] == "COMPLETED" for r in mine)
        out.append(f"| {path} | {len(mine)} | {', '.join(f'{t:.1f}' for t in times)} | "
                   f"{statistics.median(times):.1f} | {'yes' if kept else 'no'} | "
                   f"{'yes' if all(r['bit_exact'] for r in mine) else 'no'} | "
                   f"{statistics.median(r['wall_s'] for r in mine):.0f} |")
    requeue = [r["recovery_s"] for r in rows if r["path"] == "requeue"]
    inside = [r["recovery_s"] for r in rows if r["path"] == "in allocation"]
    if requeue and inside:
        out.append(f"\nin allocation / requeue (medians): "
                   f"{statistics.median(inside) / statistics.median(requeue):.2f}")
    return "\n".join(out)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--work", type=Path, default=None,
                        help="keep the job directories here (default: a temp dir)")
    args = parser.parse_args()
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True, check=False).stdout.strip()
    slurm = {**yaml.safe_load(DEFAULT_SITE.read_text())["slurm"], "slurmd_timeout_s": 20}
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as temp, \
            start_embedded_cluster(overrides={"slurm": slurm}) as cluster:
        cwd = args.work or Path(temp)
        cwd.mkdir(parents=True, exist_ok=True)
        built = gantry(cluster, cwd, "build", "--site", str(cluster.site_path), timeout=600)
        if built.returncode != 0:
            raise RuntimeError(built.stderr)
        base = one_run(cluster, cwd, "reference", None, None)
        reference = base["trajectory"]
        for round_ in range(args.rounds):
            for in_allocation in (False, True):
                name = f"{'inalloc' if in_allocation else 'requeue'}{round_}"
                row = one_run(cluster, cwd, name, in_allocation, reference)
                sys.stderr.write(f"{name}: recovery {row['recovery_s']} s, restarts "
                                 f"{row['restarts']}, bit-exact {row['bit_exact']}\n")
                rows.append(row)
                cluster.cancel_all()
    meta = {"date": time.strftime("%Y-%m-%d"), "commit": commit,
            "machine": f"{platform.node()} ({platform.processor() or platform.machine()})",
            "uninterrupted_wall_s": base["wall_s"]}
    if args.out:
        with open(args.out, "w", encoding="utf-8") as handle:
            handle.write(json.dumps({"meta": meta}) + "\n")
            for row in rows:
                handle.write(json.dumps({k: v for k, v in row.items() if k != "trajectory"})
                             + "\n")
    print(f"{meta['date']} {commit}; uninterrupted run {base['wall_s']:.0f} s wall\n")
    print(table(rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
