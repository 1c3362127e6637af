"""Reliability check: MPI start-up across emulated nodes, many small jobs in a row.

Starts a private embedded cluster (tests.embedded_cluster, free ports), optionally busy-loops
on the host's cores to make rank start-up slow and uneven, and runs N jobs of R ranks (one
per emulated node), each an mpi4py program whose first traffic follows MPI_Init at once
(bench/mpi_startup_rank.py). Counts jobs that fail or hang, keeps the output of each failure
and, with --keep, the rank core dumps. Not a timed test: a benchmark-style record whose
results go to docs/embedded-cluster.md.

Usage:
  python bench/mpi_startup_stress.py --jobs 50 --load 1 [--env OMPI_MCA_x=y ...]
      [--unset OMPI_MCA_x] [--launcher srun|mpirun] [--srun-mpi pmix] [--mode allreduce]
      [--srun-arg=--slurmd-debug=debug] [--keep DIR] [--stop-after K] [--out results.json]

Slurm's pmix plugin reads SLURM_PMIX_* from the job environment, so `--env
SLURM_PMIX_FENCE=mixed` undoes the cluster's mpi.conf (PMIxCollFence=ring) for a run.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from tests.embedded_cluster import EmbeddedCluster, start_embedded_cluster  # noqa: E402

RANK_PROGRAM = REPO / "bench" / "mpi_startup_rank.py"


@contextmanager
def busy_load(count: int) -> Iterator[None]:
    """``count`` busy-loop processes (the load of other test suites on a shared host)."""
    procs = [
        subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(count)
    ]
    try:
        yield
    finally:
        for proc in procs:
            proc.terminate()
        for proc in procs:
            proc.wait()


def parse_pairs(items: Sequence[str], flag: str) -> dict[str, str]:
    pairs: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise SystemExit(f"error: {flag} {item!r}: expected KEY=VALUE")
        pairs[key] = value
    return pairs


def job_argv(args: argparse.Namespace) -> list[str]:
    rank = [sys.executable, str(RANK_PROGRAM), args.mode]
    common = [f"--nodes={args.ranks}", "--ntasks-per-node=1", "--time=3"]
    if args.launcher == "srun":
        return ["srun", *common, f"--mpi={args.srun_mpi}", "--kill-on-bad-exit=1",
                *args.srun_arg, *rank]
    # mpirun inside an allocation: Open MPI's own runtime (orted via srun) starts the ranks.
    return [
        "salloc", *common, "mpirun", "--allow-run-as-root", "-np", str(args.ranks),
        "--map-by", "ppr:1:node", "--bind-to", "none", *rank,
    ]


def run_job(
    cluster: EmbeddedCluster, argv: list[str], env: dict[str, str], cwd: Path, timeout: float
) -> dict[str, Any]:
    """One job; its outcome: ok / failed (exit status) / hang (killed after ``timeout``)."""
    start = time.monotonic()
    proc = subprocess.Popen(
        argv, env=env, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        start_new_session=True,
    )
    try:
        output, _ = proc.communicate(timeout=timeout)
        outcome = "ok" if proc.returncode == 0 else "failed"
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGINT)
        time.sleep(0.5)
        os.killpg(proc.pid, signal.SIGINT)  # srun: a second ^C within 1 s aborts the step
        try:
            output, _ = proc.communicate(timeout=15)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            output, _ = proc.communicate()
        outcome = "hang"
        cluster.cancel_all()
    if outcome != "ok":
        (cwd / "output.txt").write_text(output)
    return {
        "outcome": outcome,
        "rc": proc.returncode,
        "seconds": round(time.monotonic() - start, 2),
        "output_tail": output[-3000:] if outcome != "ok" else "",
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=50)
    parser.add_argument("--ranks", type=int, default=4)
    parser.add_argument("--load", type=int, default=1, help="busy-loop processes")
    parser.add_argument("--mode", choices=("allreduce", "ring", "barrier"), default="allreduce")
    parser.add_argument("--launcher", choices=("srun", "mpirun"), default="srun")
    parser.add_argument("--srun-mpi", default="pmix")
    parser.add_argument("--env", action="append", default=[], help="KEY=VALUE for ranks")
    parser.add_argument("--unset", action="append", default=[], help="drop a site mpi.env key")
    parser.add_argument("--srun-arg", action="append", default=[],
                        help="extra srun option, e.g. --slurmd-debug=debug")
    parser.add_argument("--timeout", type=float, default=60, help="seconds before a hang")
    parser.add_argument("--keep", type=Path,
                        help="keep each failed job's output and rank core dumps under this dir")
    parser.add_argument("--stop-after", type=int, default=0, help="stop at this many failures")
    parser.add_argument("--out", type=Path, help="write the JSON record here too")
    args = parser.parse_args()

    extra_env = parse_pairs(args.env, "--env")
    if args.keep:
        args.keep.mkdir(parents=True, exist_ok=True)
        resource.setrlimit(resource.RLIMIT_CORE, (resource.RLIM_INFINITY, resource.RLIM_INFINITY))

    results: list[dict[str, Any]] = []
    started = time.strftime("%Y-%m-%d %H:%M")
    with start_embedded_cluster() as cluster:
        env = {k: v for k, v in cluster.env.items() if k not in args.unset}
        env.update(extra_env)
        mpi_env = {k: env[k] for k in sorted(env) if k.startswith(("OMPI_", "PMIX_", "SLURM_PMIX"))}
        mpi_conf_path = cluster.run_dir / "etc" / "mpi.conf"
        mpi_conf = [
            line for line in (mpi_conf_path.read_text() if mpi_conf_path.exists() else "")
            .splitlines() if line and not line.startswith("#")
        ]
        argv = job_argv(args)
        with busy_load(args.load):
            for index in range(args.jobs):
                cwd = (args.keep or cluster.run_dir / "stress") / f"job{index:04d}"
                cwd.mkdir(parents=True, exist_ok=True)
                result = run_job(cluster, argv, env, cwd, args.timeout)
                if result["outcome"] == "ok":
                    shutil.rmtree(cwd, ignore_errors=True)
                result["job"] = index
                results.append(result)
                if result["outcome"] != "ok":
                    print(f"job {index}: {result['outcome']} rc={result['rc']}\n"
                          f"{result['output_tail'][-1500:]}", file=sys.stderr, flush=True)
                failures = sum(r["outcome"] != "ok" for r in results)
                if args.stop_after and failures >= args.stop_after:
                    break
    summary = {
        "date": started,
        "host": platform.node(),
        "cpus": os.cpu_count(),
        "loadavg_end": os.getloadavg(),
        "launcher": args.launcher,
        "srun_mpi": args.srun_mpi,
        "mode": args.mode,
        "ranks": args.ranks,
        "busy_loops": args.load,
        "mpi_conf": mpi_conf,
        "mpi_env": mpi_env,
        "jobs": len(results),
        "ok": sum(r["outcome"] == "ok" for r in results),
        "failed": sum(r["outcome"] == "failed" for r in results),
        "hang": sum(r["outcome"] == "hang" for r in results),
        "median_s": sorted(r["seconds"] for r in results)[len(results) // 2] if results else None,
        "failures": [r for r in results if r["outcome"] != "ok"],
    }
    text = json.dumps(summary, indent=1)
    if args.out:
        args.out.write_text(text + "\n")
    brief = {k: v for k, v in summary.items() if k != "failures"}
    print(json.dumps(brief))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
