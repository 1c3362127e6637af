"""Benchmark: `gantry preflight --level quick` on one node, and the whole-allocation gate.

    python bench/bench_preflight.py quick [--site S] [--fake-h200] [--runs N]
    python bench/bench_preflight.py gate [--nodes 8] [--runs N]     (embedded cluster)

quick: wall time of the CLI as a user runs it (process start to exit), median of N runs;
anchors measured in the same run: a bare interpreter start and one ``nvidia-smi -q -x``
(the slowest tool call on GPU nodes). ``--fake-h200`` uses the recorded H200 outputs
through GANTRY_NVIDIA_SMI (a CPU-only machine), else the node's real tools.
gate: starts a private embedded cluster, then ``salloc -N<n> gantry gate`` (srun preflight
on every node, aggregation, drain policy, decision); anchor: ``salloc -N<n> srun true``.
Targets (issue 6): quick <= 3 s per node, gate for 8 nodes <= 10 s. Prints one JSON object.
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

REPO = Path(__file__).resolve().parent.parent
FIXTURES = REPO / "tests" / "fixtures" / "preflight"


def timed(argv: list[str], env: dict[str, str] | None = None) -> tuple[float, int, str]:
    start = time.perf_counter()
    proc = subprocess.run(argv, capture_output=True, text=True, env=env, check=False)
    return time.perf_counter() - start, proc.returncode, proc.stdout


def median_of(runs: int, argv: list[str], env: dict[str, str] | None = None) -> dict[str, Any]:
    times, codes, last = [], [], ""
    for _ in range(runs):
        took, code, last = timed(argv, env)
        times.append(took)
        codes.append(code)
    return {"median_s": round(statistics.median(times), 3), "min_s": round(min(times), 3),
            "max_s": round(max(times), 3), "exit_codes": sorted(set(codes)), "stdout": last}


def bench_quick(args: argparse.Namespace) -> dict[str, Any]:
    env = dict(os.environ)
    extra = env.get("PYTHONPATH")
    env["PYTHONPATH"] = str(REPO) + (os.pathsep + extra if extra else "")
    site = args.site
    if args.fake_h200:
        env.update(
            GANTRY_NVIDIA_SMI=str(FIXTURES / "fake-nvidia-smi"),
            GANTRY_FAKE_SMI_DIR=str(FIXTURES / "h200-x2"),
        )
        if site is None:
            tmp = Path(tempfile.mkdtemp(prefix="bench-preflight-"))
            site = tmp / "h200.yaml"
            site.write_text(
                "name: bench-h200\nnodes: {names: n1, cpus: 1, real_memory_mb: 1, "
                "gpus_per_node: 2, gpu_model: NVIDIA H200}\n"
                f"preflight: {{state_dir: {tmp / 'state'}}}\n"
            )
    argv = [sys.executable, "-m", "launcher", "preflight", "--level", "quick", "--json"]
    if site is not None:
        argv += ["--site", str(site)]
    result = median_of(args.runs, argv, env)
    verdict = json.loads(result.pop("stdout"))
    smi = env.get("GANTRY_NVIDIA_SMI") or "nvidia-smi"
    anchors = {
        "python_start_s": median_of(args.runs, [sys.executable, "-c", "pass"])["median_s"],
    }
    try:
        anchors["nvidia_smi_q_x_s"] = median_of(args.runs, [smi, "-q", "-x"], env)["median_s"]
    except OSError:
        anchors["nvidia_smi_q_x_s"] = None
    return {
        "bench": "preflight-quick",
        "target_s": 3.0,
        **result,
        "verdict_status": verdict["status"],
        "verdict_duration_s": verdict["duration_s"],
        "gpu_source": verdict["gpu_source"],
        "anchors": anchors,
    }


def bench_gate(args: argparse.Namespace) -> dict[str, Any]:
    sys.path.insert(0, str(REPO))
    from tests.embedded_cluster import start_embedded_cluster  # needs the cluster package

    with start_embedded_cluster() as c:
        env = dict(c.env)
        n = args.nodes
        anchor = median_of(args.runs, ["salloc", f"-N{n}", "srun", "true"], env)
        gate = [sys.executable, "-m", "launcher", "gate", "--site", str(c.site_path),
                "--level", "quick", "--no-requeue", "--json"]
        result = median_of(args.runs, ["salloc", f"-N{n}", *gate], env)
        report = json.loads(result.pop("stdout"))
        return {
            "bench": "preflight-gate",
            "nodes": n,
            "target_s": 10.0,
            **result,
            "decision": report["decision"],
            "gate_duration_s": report["duration_s"],
            "srun_preflight_s": report["preflight_s"],
            "anchors": {"salloc_srun_true_s": anchor["median_s"]},
        }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="what", required=True)
    quick = sub.add_parser("quick")
    quick.add_argument("--site", type=Path, default=None)
    quick.add_argument("--fake-h200", action="store_true")
    quick.add_argument("--runs", type=int, default=5)
    gate = sub.add_parser("gate")
    gate.add_argument("--nodes", type=int, default=8)
    gate.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    result = bench_quick(args) if args.what == "quick" else bench_gate(args)
    result["machine"] = f"{platform.node()} ({os.cpu_count()} CPUs, {platform.machine()})"
    result["python"] = platform.python_version()
    result["date"] = time.strftime("%Y-%m-%d")
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
