"""Submit latency: `gantry submit` next to submitit and plain sbatch, for the same 2-node job.

Runs on the embedded cluster (started here via tests.embedded_cluster when available, else the
cluster named by $SLURM_CONF). Each sample submits one job and cancels it (untimed). Reports
median / p90 in milliseconds:

- sbatch          `sbatch --parsable --wrap true` (the anchor: controller round trip)
- gantry (API)    resolve + render + job directory + sbatch, in-process
- gantry (API + placement)  the same plus the live placement (sbatch --version, sinfo --json,
                  topology plan), as `gantry submit` does
- gantry (CLI)    `python -m launcher submit job.yaml -- true` (includes interpreter start)
- submitit        AutoExecutor.submit(fn) (pickle + script + sbatch), in-process

Usage: python bench/bench_submit.py [--samples N]
"""

from __future__ import annotations

import argparse
import contextlib
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from launcher.job_dir import create_job_dir, new_job_dir_path, record_submission  # noqa: E402
from launcher.job_overrides import CliOverrides  # noqa: E402
from launcher.job_placement import place_job  # noqa: E402
from launcher.job_request import resolve_request  # noqa: E402
from launcher.job_script import render_job  # noqa: E402
from launcher.slurm import CommandRunner, make_client  # noqa: E402

JOB_YAML = """name: bench
model: {n_layer: 2, n_head: 2, n_embd: 8}
parallelism: {pp: 2, dp: 1}
resources: {nodes: 2, time_limit: '00:05:00'}
policy: {preflight_level: 'off'}
"""


@contextlib.contextmanager
def cluster_env() -> Iterator[tuple[dict[str, str], Path | None, str]]:
    try:
        from tests.embedded_cluster import start_embedded_cluster
    except ImportError:
        if "SLURM_CONF" not in os.environ:
            raise SystemExit("bench_submit: no cluster helper and no $SLURM_CONF") from None
        yield dict(os.environ), None, "debug"
        return
    with start_embedded_cluster() as cluster:
        yield dict(cluster.env), cluster.site_path, cluster.partition


def timed(fn: Callable[[], str], cancel: Callable[[str], None], samples: int) -> list[float]:
    times = []
    for _ in range(samples):
        start = time.perf_counter()
        job_id = fn()
        times.append((time.perf_counter() - start) * 1000)
        cancel(job_id)
    return times


def summary(name: str, times: list[float]) -> str:
    ordered = sorted(times)
    p90 = ordered[min(len(ordered) - 1, round(0.9 * (len(ordered) - 1)))]
    return f"| {name} | {statistics.median(times):.1f} | {p90:.1f} | {len(times)} |"


def noop() -> int:
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=20)
    args = parser.parse_args()
    import submitit

    with cluster_env() as (env, site_path, partition), \
            tempfile.TemporaryDirectory(prefix="gantry-bench-") as tmp_name:
        os.environ.update(env)
        tmp = Path(tmp_name)
        job = tmp / "bench.yaml"
        job.write_text(JOB_YAML)
        runner = CommandRunner(env=env)
        client = make_client("cli", runner)

        def cancel(job_id: str) -> None:
            runner.run(["scancel", job_id], check=False)

        def sbatch() -> str:
            out = runner.run(["sbatch", "--parsable", "-N2", f"--partition={partition}",
                              "-t", "5", f"--output={tmp}/raw-%j.out", "--wrap", "true"])
            return out.stdout.strip()

        def gantry_api() -> str:
            request = resolve_request(job, site_path, CliOverrides(command=("true",)))
            root = tmp / "jobs"
            path = new_job_dir_path(root, request.spec.name)
            script = render_job(request, path, tmp)
            job_dir = create_job_dir(path, script, request.raw, {}, {}, request.spec.name)
            job_id = client.submit(job_dir.script)
            record_submission(root, job_dir, job_id)
            return job_id

        def gantry_api_placed() -> str:
            request = resolve_request(job, site_path, CliOverrides(command=("true",)))
            root = tmp / "jobs"
            path = new_job_dir_path(root, request.spec.name)
            placement = place_job(request, make_client("cli", runner))  # fresh: no caches
            script = render_job(request, path, tmp, placement.script_placement())
            job_dir = create_job_dir(path, script, request.raw, {}, placement.to_json(),
                                     request.spec.name)
            job_id = client.submit(job_dir.script)
            record_submission(root, job_dir, job_id)
            return job_id

        cli_args = [sys.executable, "-m", "launcher", "submit", str(job), "--json",
                    "--jobs-dir", str(tmp / "cli-jobs")]
        if site_path is not None:
            cli_args += ["--site", str(site_path)]

        def gantry_cli() -> str:
            out = subprocess.run([*cli_args, "--", "true"], capture_output=True, text=True,
                                 env={**env, "PYTHONPATH": str(REPO)}, check=True, cwd=tmp)
            import json
            return str(json.loads(out.stdout)["job_id"])

        executor = submitit.AutoExecutor(folder=tmp / "submitit", cluster="slurm")
        executor.update_parameters(slurm_partition=partition, nodes=2, tasks_per_node=1,
                                   timeout_min=5)

        def submitit_submit() -> str:
            return str(executor.submit(noop).job_id)

        for fn in (sbatch, gantry_api, gantry_api_placed, gantry_cli,
                   submitit_submit):  # warm up
            cancel(fn())
        rows = [
            summary("sbatch --parsable --wrap (anchor)", timed(sbatch, cancel, args.samples)),
            summary("gantry submit (in-process API)", timed(gantry_api, cancel, args.samples)),
            summary("gantry submit (in-process API + live placement)",
                    timed(gantry_api_placed, cancel, args.samples)),
            summary("gantry submit (CLI process)", timed(gantry_cli, cancel, args.samples)),
            summary(f"submitit {submitit.__version__} AutoExecutor.submit",
                    timed(submitit_submit, cancel, args.samples)),
        ]
        version = runner.run(["sbatch", "--version"]).stdout.strip()
    print(f"date: {time.strftime('%Y-%m-%d')}; machine: {platform.node()} "
          f"({os.cpu_count()} cores); {version}; Python {platform.python_version()}")
    print("| what | median ms | p90 ms | samples |\n|---|---|---|---|")
    print("\n".join(rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
