"""CLI start-up: wall time of short gantry commands next to a bare interpreter start.

Each sample is one fresh process, run from the checkout with this interpreter (the venv's, so
the anchor pays the same site-packages start-up as gantry does). The cases are interleaved
round by round, so load on a shared machine hits them alike; reported per case: median and
p90 in milliseconds and the median's ratio to the anchor of the same run.

- anchor          ``python -c pass``
- python -m       ``python -m launcher --help``
- gantry --help   the ``gantry`` console script next to the interpreter (skipped if absent
                  or with ``--module``: then every gantry case is ``python -m launcher``)
- gantry status   ``gantry status --jobs-dir <empty dir>``
- gantry render   ``gantry render examples/gpt2-tiny-pp2-dp2.yaml`` (jinja2 and the
                  placement are its work: not expected near the anchor)
- with ``--job-site SITE`` (an embedded site: its cluster is brought up): one job submitted
  held (``--sbatch-option=--hold``, so it stays PENDING and squeue lists it), then
  ``gantry status`` (the table of that job) and ``gantry status JOB`` (its one-job view with
  goodput), and beside them the one Slurm query they wait on (``squeue --all --json``, the
  cluster's SLURM_CONF): its share of their time is Slurm's, not gantry's start-up; the job is
  cancelled at the end

    python bench/bench_cli_start.py [--runs 30] [--job-site site_configs/local.yaml]
                                    [--out bench/results/NAME]  # NAME.json + .md
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def gantry_argv(module: bool = False) -> list[str]:
    """How the cases run gantry: the console script beside the interpreter, else (or with
    ``module``) ``python -m launcher``."""
    script = Path(sys.executable).with_name("gantry")
    return [str(script)] if script.is_file() and not module else [sys.executable, "-m",
                                                                   "launcher"]


def cases(jobs_dir: Path, module: bool = False) -> dict[str, list[str]]:
    python = sys.executable
    gantry = gantry_argv(module)
    out = {
        "anchor: python -c pass": [python, "-c", "pass"],
        "python -m launcher --help": [python, "-m", "launcher", "--help"],
    }
    if gantry[0] != python:
        out["gantry --help"] = [*gantry, "--help"]
    out["gantry status (empty jobs dir)"] = [*gantry, "status", "--jobs-dir", str(jobs_dir)]
    out["gantry render (example job)"] = [
        *gantry, "render", str(REPO / "examples" / "gpt2-tiny-pp2-dp2.yaml"), "--site",
        str(REPO / "site_configs" / "local.yaml"), "--jobs-dir", str(jobs_dir)]
    return out


def slurm_conf(gantry: list[str], site: Path, env: dict[str, str]) -> str:
    """The embedded cluster's slurm.conf, as `gantry cluster env` exports it."""
    done = subprocess.run([*gantry, "cluster", "env", "--site", str(site)], cwd=REPO, env=env,
                          check=True, capture_output=True, text=True)
    for line in done.stdout.splitlines():
        if line.startswith("export SLURM_CONF="):
            return shlex.split(line.removeprefix("export SLURM_CONF="))[0]
    raise SystemExit(f"bench_cli_start: `gantry cluster env` printed no SLURM_CONF for {site}")


def held_job(gantry: list[str], site: Path, jobs_dir: Path, env: dict[str, str]) -> str:
    """Bring ``site``'s embedded cluster up and submit the example DDP job held; its id."""
    subprocess.run([*gantry, "cluster", "up", "--site", str(site)], cwd=REPO, env=env,
                   check=True, stdout=subprocess.DEVNULL)
    done = subprocess.run(
        [*gantry, "submit", str(REPO / "examples" / "ddp" / "ddp-cpu.yaml"), "--site", str(site),
         "--jobs-dir", str(jobs_dir), "--nodes", "1", "--spares", "0", "--preflight", "off",
         "--sbatch-option=--hold", "--json"],
        cwd=REPO, env=env, check=True, capture_output=True, text=True)
    return str(json.loads(done.stdout)["job_id"])


def time_once(argv: list[str], env: dict[str, str]) -> float:
    start = time.perf_counter()
    done = subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                          cwd=REPO, env=env, check=False)
    took = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"bench_cli_start: {' '.join(argv)} exited {done.returncode}")
    return took


def git_commit() -> str:
    out = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"],
                         capture_output=True, text=True, check=False)
    return out.stdout.strip() or "unknown"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=30, help="samples per case (default 30)")
    parser.add_argument("--module", action="store_true",
                        help="run every gantry case as `python -m launcher` from this checkout "
                             "(when the console script belongs to another install)")
    parser.add_argument("--job-site", type=Path, default=None,
                        help="also time `gantry status` of a held job on this embedded site")
    parser.add_argument("--out", type=Path, default=None,
                        help="write OUT.json (raw samples) and OUT.md (the table)")
    args = parser.parse_args()
    # PYTHONDONTWRITEBYTECODE would make the warm-up leave stale bytecode stale: every sample
    # would compile the changed modules again, which no installed gantry does.
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("GANTRY_") and k != "PYTHONDONTWRITEBYTECODE"}
    with tempfile.TemporaryDirectory(prefix="gantry-bench-jobs-") as tmp:
        table = cases(Path(tmp), args.module)
        job_id = None
        case_env: dict[str, dict[str, str]] = {}
        if args.job_site is not None:
            jobs_dir = Path(tmp) / "held"
            gantry = gantry_argv(args.module)
            job_id = held_job(gantry, args.job_site.resolve(), jobs_dir, env)
            table["gantry status (one held job)"] = [*gantry, "status", "--jobs-dir",
                                                     str(jobs_dir)]
            table["gantry status JOB (held job)"] = [*gantry, "status", job_id, "--jobs-dir",
                                                     str(jobs_dir)]
            query = "their Slurm query: squeue --all --json"
            table[query] = ["squeue", "--all", "--json"]
            case_env[query] = {"SLURM_CONF": slurm_conf(gantry, args.job_site.resolve(), env)}
        try:
            for name, argv in table.items():  # warm the page cache and __pycache__
                time_once(argv, {**env, **case_env.get(name, {})})
            samples: dict[str, list[float]] = {name: [] for name in table}
            for _ in range(args.runs):
                for name, argv in table.items():
                    samples[name].append(time_once(argv, {**env, **case_env.get(name, {})}))
        finally:
            if job_id is not None:
                subprocess.run([*gantry, "cancel", job_id, "--jobs-dir", str(jobs_dir)],
                               cwd=REPO, env=env, check=False, stdout=subprocess.DEVNULL)
    anchor = statistics.median(samples["anchor: python -c pass"])
    rows = []
    for name, values in samples.items():
        ordered = sorted(values)
        median = statistics.median(ordered)
        p90 = ordered[min(len(ordered) - 1, int(0.9 * len(ordered)))]
        rows.append({"case": name, "median_ms": round(median * 1e3, 1),
                     "p90_ms": round(p90 * 1e3, 1), "x_anchor": round(median / anchor, 2)})
    meta = {
        "date": datetime.date.today().isoformat(),
        "commit": git_commit(),
        "python": platform.python_version(),
        "machine": f"{platform.machine()}, {os.cpu_count()} CPUs, "
                   f"load {os.getloadavg()[0]:.2f}",
        "runs": args.runs,
    }
    lines = [f"CLI start-up, {meta['date']}, commit {meta['commit']}, Python {meta['python']}, "
             f"{meta['machine']}, {args.runs} runs per case (median / p90)", "",
             "| command | median ms | p90 ms | x anchor |", "|---|---|---|---|"]
    lines += [f"| {r['case']} | {r['median_ms']} | {r['p90_ms']} | {r['x_anchor']} |"
              for r in rows]
    text = "\n".join(lines) + "\n"
    sys.stdout.write(text)
    if args.out is not None:
        args.out.with_suffix(".json").write_text(
            json.dumps({**meta, "rows": rows, "samples_s": samples}, indent=2) + "\n")
        args.out.with_suffix(".md").write_text(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
