"""`gantry demo`: gantry's main job on the embedded cluster.

For now: bring the cluster up (a no-op when it is up), submit a generated sbatch script
that runs an mpi4py all-reduce across N nodes through `srun --mpi=<site>`, wait for it and
print the result with a short summary. Exit 1 when the job fails or the sum is wrong.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import launcher
from launcher.cluster import client, jobs, lifecycle
from launcher.cluster.demo_job import render_allreduce_script
from launcher.console import make_console, print_json
from launcher.errors import EXIT_OK, GantryError, UserInputError
from launcher.site_config import DEFAULT_SITE, load_site

REPO_ROOT = Path(launcher.__file__).resolve().parent.parent


def _parse_result(output: str) -> dict[str, Any] | None:
    for line in reversed(output.splitlines()):
        if line.startswith("{"):
            try:
                data = json.loads(line)
            except ValueError:
                continue
            if isinstance(data, dict) and "sum" in data:
                return data
    return None


def _demo(args: argparse.Namespace) -> int:
    site = load_site(args.site)
    node_count = len(site.config.nodes.node_list())
    if not 1 <= args.nodes <= node_count:
        raise UserInputError(
            f"--nodes: {args.nodes} is not allowed (expected 1..{node_count}, the nodes of "
            f"{site.path})"
        )
    if args.timeout <= 0:
        raise UserInputError(f"--timeout: {args.timeout} is not allowed (expected seconds > 0)")
    console = make_console()
    up = lifecycle.up(site)
    layout = up.plan.layout
    if not args.json:
        state = "already up" if up.already_running else f"up in {up.seconds:.1f} s"
        console.print(
            f"cluster {site.config.slurm.cluster_name} {state} ({node_count} nodes)",
            markup=False,
        )

    job_dir = layout.jobs_dir / f"demo-{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}"
    job_dir.mkdir(parents=True)
    script = job_dir / "job.sbatch"
    output = job_dir / "output.txt"
    script.write_text(
        render_allreduce_script(
            python=sys.executable,
            pythonpath=str(REPO_ROOT),
            srun_mpi=site.config.mpi.srun_mpi,
            mpi_env=site.config.mpi.env,
        )
    )
    started = time.monotonic()
    submitted = client.run(
        layout,
        "sbatch",
        [
            "--parsable",
            "--job-name=gantry-demo",
            f"--nodes={args.nodes}",
            "--ntasks-per-node=1",
            f"--partition={site.config.slurm.partition}",
            f"--output={output}",
            f"--chdir={job_dir}",
            "--time=10",
            str(script),
        ],
    )
    if submitted.returncode != 0:
        raise GantryError(f"sbatch {script} failed: {submitted.stderr.strip()}")
    job_id = submitted.stdout.strip().split(";")[0]
    try:
        info = jobs.wait_for_job(layout, job_id, timeout=args.timeout)
    except GantryError as err:
        client.run(layout, "scancel", [job_id])
        raise GantryError(f"demo {err}; cancelled it (output so far: {output})") from None
    seconds = time.monotonic() - started
    text = output.read_text(errors="replace") if output.exists() else ""
    result = _parse_result(text)
    ok = info.state == "COMPLETED" and result is not None and result["sum"] == result["expected"]
    summary = {
        "ok": ok,
        "job_id": job_id,
        "state": info.state,
        "exit_code": info.exit_code,
        "nodes": info.nodes,
        "seconds": round(seconds, 2),
        "result": result,
        "script": str(script),
        "output": str(output),
    }
    if args.json:
        print_json(summary)
    else:
        if result is not None:
            console.print(
                f"all-reduce of rank+1 over {result['ranks']} ranks on {info.nodes} "
                f"(srun --mpi={site.config.mpi.srun_mpi}): sum {result['sum']}, expected "
                f"{result['expected']}: {'ok' if ok else 'WRONG'}",
                markup=False,
            )
        console.print(
            f"job {job_id} {info.state} (exit {info.exit_code}) in {seconds:.1f} s; "
            f"script {script}; output {output}",
            markup=False,
        )
    if not ok:
        raise GantryError(f"demo job {job_id} {info.state} (exit {info.exit_code}); see {output}")
    return EXIT_OK


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "demo",
        help="run gantry's main job on the embedded cluster",
        description="Bring the embedded cluster up and run gantry's main job on it: for now "
        "an mpi4py all-reduce across several nodes, submitted as a generated sbatch script.",
    )
    parser.add_argument(
        "--site",
        type=Path,
        default=DEFAULT_SITE,
        metavar="PATH",
        help="site config (default: site_configs/local.yaml)",
    )
    parser.add_argument(
        "--nodes", type=int, default=4, metavar="N", help="nodes (one rank each; default 4)"
    )
    parser.add_argument(
        "--timeout",
        type=float,
        default=120.0,
        metavar="SECONDS",
        help="how long to wait for the job (default: 120)",
    )
    parser.add_argument("--json", action="store_true", help="print the summary as JSON")
    parser.set_defaults(func=_demo)
