"""Runs the active tests (standard/deep levels) in child processes and judges their numbers.

standard: GPU nodes -> gpu.gemm (exact checksum + bf16 TFLOP/s) and gpu.membw;
          CPU-only -> cpu.gemm.
deep:     GPU nodes with >= 2 GPUs -> gpu.nccl (all-reduce bus bandwidth, p2p);
          CPU-only -> mpi.ping between two local ranks.
A test that hangs past active_timeout_s is killed and FAILs; one that cannot start its
runtime (no mpirun, torch seeing no GPU) FAILs too, naming what was missing. A test whose
Python module is missing from gantry's own install (torch, mpi4py) is a setup error: ERROR,
naming what to install, never a node FAIL (the node is not at fault; nothing drains it).
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from launcher.preflight.result import CheckResult, setup_error, skipped, token
from launcher.preflight.thresholds import Thresholds
from launcher.process_runner import ToolOutput, run_tool
from launcher.slurm.tools import tool_path

ACTIVE_MODULE = "launcher.preflight.active"


def _run(
    test: str, th: Thresholds, env: Mapping[str, str] | None, prefix: list[str] | None = None
) -> tuple[dict[str, Any] | None, ToolOutput]:
    argv = [*(prefix or []), sys.executable, "-m", ACTIVE_MODULE, test]
    out = run_tool(argv, th.active_timeout_s, env)
    if not out.ok:
        return None, out
    lines = [line for line in out.stdout.splitlines() if line.startswith("{")]
    try:
        return (json.loads(lines[-1]) if lines else None), out
    except json.JSONDecodeError:
        return None, out


def _setup_error(
    data: dict[str, Any] | None, out: ToolOutput, checks: Sequence[tuple[str, str]]
) -> list[CheckResult] | None:
    """ERROR results for ``checks`` ((id, expected) each) when the test reported a module
    missing from gantry's install, else None."""
    missing = data.get("setup_error") if data is not None else None
    if not isinstance(missing, dict):
        return None
    evidence = " ".join(out.argv[-3:])
    return [setup_error(cid, str(missing.get("module")), str(missing.get("message")),
                        str(missing.get("python")), expected, evidence,
                        out.duration_s / len(checks))
            for cid, expected in checks]


def _broken(cid: str, out: ToolOutput, expected: str) -> CheckResult:
    return CheckResult(
        cid,
        "FAIL",
        out.describe_failure(),
        expected,
        " ".join(out.argv[-3:]),
        "run the test by hand on the node; check the runtime",
        detail="hung" if out.timed_out else "error",
        duration_s=out.duration_s,
    )


@dataclass(frozen=True)
class _Rule:
    """One way an active test fails, in the order the check judges them."""

    findings: list[str]
    """What breaks the rule ("GPU1: 3 wrong elements"), one line each; empty: the rule holds."""
    action: str
    """What an operator should do when it is broken."""
    detail: str
    """Drain detail; ``{gpu}`` stands for the GPU the first finding names."""


def _judge(
    cid: str, expected: str, evidence: str, duration_s: float, ok: str, rules: Sequence[_Rule]
) -> CheckResult:
    """FAIL by the first broken rule (observed: its findings), else PASS observing ``ok``."""
    for rule in rules:
        if rule.findings:
            gpu = rule.findings[0].split(":")[0]
            return CheckResult(
                cid,
                "FAIL",
                "; ".join(rule.findings),
                expected,
                evidence,
                rule.action,
                detail=token(rule.detail.format(gpu=gpu)),
                duration_s=duration_s,
            )
    return CheckResult(cid, "PASS", ok, expected, evidence, duration_s=duration_s)


def _broken_if(condition: bool, observed: str) -> list[str]:
    """The findings of a rule over one measurement: [observed] when it breaks the rule."""
    return [observed] if condition else []


def gpu_compute_checks(th: Thresholds, env: Mapping[str, str] | None) -> list[CheckResult]:
    """gpu.gemm and gpu.membw from one child process."""
    exp_gemm = f"exact checksum on every GPU; bf16 GEMM >= {th.gemm_tflops_min:g} TFLOP/s"
    exp_bw = f"device copy >= {th.membw_gbps_min:g} GB/s per GPU"
    data, out = _run("gpu_compute", th, env)
    setup = _setup_error(data, out, [("gpu.gemm", exp_gemm), ("gpu.membw", exp_bw)])
    if setup is not None:
        return setup
    if data is None or not data.get("gpus"):
        if data is not None:
            out = ToolOutput(out.argv, 1, "", "torch sees no CUDA device", out.duration_s)
        return [_broken("gpu.gemm", out, exp_gemm), _broken("gpu.membw", out, exp_bw)]
    gpus = data["gpus"]
    wrong = [f"GPU{g['index']}: {g['mismatches']} wrong elements" for g in gpus if g["mismatches"]]
    slow = [
        f"GPU{g['index']}: {g['tflops_bf16']:.0f} TFLOP/s"
        for g in gpus
        if g["tflops_bf16"] < th.gemm_tflops_min
    ]
    seen = "; ".join(f"GPU{g['index']} {g['tflops_bf16']:.0f} TFLOP/s" for g in gpus)
    evidence = f"{ACTIVE_MODULE} gpu_compute (torch, {len(gpus)} GPUs)"
    half = out.duration_s / 2
    gemm = _judge(
        "gpu.gemm",
        exp_gemm,
        evidence,
        half,
        seen,
        (
            _Rule(wrong, "silent data corruption: drain and RMA the GPU", "{gpu}-checksum"),
            _Rule(slow, "check clocks/power/thermals (gpu.clocks, gpu.power)", "{gpu}-slow"),
        ),
    )
    lows = [
        f"GPU{g['index']}: {g['membw_gbps']:.0f} GB/s"
        for g in gpus
        if g["membw_gbps"] < th.membw_gbps_min
    ]
    bw_seen = "; ".join(f"GPU{g['index']} {g['membw_gbps']:.0f} GB/s" for g in gpus)
    membw = _judge(
        "gpu.membw",
        exp_bw,
        evidence,
        half,
        bw_seen,
        (_Rule(lows, "HBM degraded or clocks capped: reset, then RMA", "{gpu}-slow"),),
    )
    return [gemm, membw]


def gpu_nccl_check(th: Thresholds, env: Mapping[str, str] | None) -> CheckResult:
    """gpu.nccl: single-node all-reduce bus bandwidth and p2p bandwidth."""
    expected = (
        f"all-reduce busbw >= {th.nccl_allreduce_busbw_gbps_min:g} GB/s, "
        f"p2p >= {th.nccl_p2p_gbps_min:g} GB/s (1 GiB)"
    )
    data, out = _run("gpu_nccl", th, env)
    setup = _setup_error(data, out, [("gpu.nccl", expected)])
    if setup is not None:
        return setup[0]
    if data is None:
        return _broken("gpu.nccl", out, expected)
    if "skipped" in data:
        return skipped("gpu.nccl", str(data["skipped"]))
    p2p = {int(k): float(v) for k, v in data["p2p_gbps"].items()}
    observed = f"busbw {data['busbw_gbps']:.0f} GB/s; " + "; ".join(
        f"GPU0->GPU{k} {v:.0f} GB/s" for k, v in sorted(p2p.items())
    )
    evidence = f"{ACTIVE_MODULE} gpu_nccl (torch.distributed NCCL, {data['world']} GPUs)"
    slow = [k for k, v in p2p.items() if v < th.nccl_p2p_gbps_min]
    too_slow = data["busbw_gbps"] < th.nccl_allreduce_busbw_gbps_min or bool(slow)
    return _judge(
        "gpu.nccl",
        expected,
        evidence,
        out.duration_s,
        observed,
        (
            _Rule(
                _broken_if(too_slow, observed),
                "check NVLink (gpu.nvlink) and NCCL topology (nvidia-smi topo -m)",
                f"gpu{slow[0]}-p2p-slow" if slow else "allreduce-slow",
            ),
        ),
    )


def cpu_gemm_check(th: Thresholds, env: Mapping[str, str] | None) -> CheckResult:
    """cpu.gemm: exact checksum and rate of a float64 GEMM (numpy/BLAS)."""
    expected = f"exact checksum; >= {th.cpu_gemm_gflops_min:g} GFLOP/s"
    data, out = _run("cpu_gemm", th, env)
    if data is None:
        return _broken("cpu.gemm", out, expected)
    observed = f"{data['mismatches']} wrong elements, {data['gflops']:.1f} GFLOP/s"
    evidence = f"{ACTIVE_MODULE} cpu_gemm (numpy float64 vs int64 product)"
    return _judge(
        "cpu.gemm",
        expected,
        evidence,
        out.duration_s,
        observed,
        (
            _Rule(
                _broken_if(bool(data["mismatches"]), observed),
                "CPU/memory corruption: run memtest, check the BMC",
                "checksum",
            ),
            _Rule(
                _broken_if(data["gflops"] < th.cpu_gemm_gflops_min, observed),
                "CPU throttled or overloaded: check frequency and load",
                "slow",
            ),
        ),
    )


def mpi_ping_check(
    th: Thresholds, env: Mapping[str, str] | None, mpi_env: Mapping[str, str]
) -> CheckResult:
    """mpi.ping: round trip between two local MPI ranks (mpirun -np 2)."""
    expected = f"2 local ranks exchange messages, round trip <= {th.mpi_ping_us_max:g} us"
    mpirun = tool_path("mpirun", env)
    if mpirun is None:
        return CheckResult(
            "mpi.ping",
            "FAIL",
            "mpirun not found",
            expected,
            "PATH",
            "install MPI or set GANTRY_MPIRUN",
            detail="no-mpirun",
        )
    child_env = dict(os.environ if env is None else env)
    child_env.update(mpi_env)
    for key in [k for k in child_env if k.startswith(("SLURM_", "PMIX_", "OMPI_COMM"))]:
        del child_env[key]  # a plain local launch, not a step of the surrounding job
    prefix = [mpirun, "-np", "2", "--oversubscribe"]
    if os.geteuid() == 0:
        prefix.append("--allow-run-as-root")
    start = time.monotonic()
    data, out = _run("mpi_ping", th, child_env, prefix)
    setup = _setup_error(data, out, [("mpi.ping", expected)])
    if setup is not None:
        return setup[0]
    if data is None or "rtt_us" not in data:
        return _broken("mpi.ping", out, expected)
    observed = f"{data['ranks']} ranks, round trip {data['rtt_us']:.1f} us"
    evidence = f"{mpirun} -np 2 python -m {ACTIVE_MODULE} mpi_ping"
    took = time.monotonic() - start
    return _judge(
        "mpi.ping",
        expected,
        evidence,
        took,
        observed,
        (
            _Rule(
                _broken_if(data["rtt_us"] > th.mpi_ping_us_max, observed),
                "check the MPI transport settings (mpi.env)",
                "slow",
            ),
        ),
    )
