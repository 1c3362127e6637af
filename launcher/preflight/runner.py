"""Runs preflight on this node: collect once (in parallel, under watchdogs), check, verdict.

Collectors run concurrently; each one past its deadline is reported as hung (its facts carry
the error and the checks that need them FAIL or SKIP accordingly). Passive checks are pure
and fast; active tests (standard/deep) run in child processes with their own watchdogs.
"""

from __future__ import annotations

import contextlib
import datetime
import os
import socket
import time
from collections.abc import Callable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, TypeVar

import launcher
from launcher.atomic_write import WriteError
from launcher.preflight import active_checks
from launcher.preflight.checks_gpu import GPU_CHECKS
from launcher.preflight.checks_host import HOST_CHECKS
from launcher.preflight.context import Baseline, Expectations, NodeFacts, current_counters
from launcher.preflight.facts import GpuInventory, HostFacts, KernelLog
from launcher.preflight.gpu_collect import collect_gpus
from launcher.preflight.host_info import collect_disks, collect_host
from launcher.preflight.ib_ports import collect_ib_ports
from launcher.preflight.kernel_log import collect_kernel_log
from launcher.preflight.levels import Level
from launcher.preflight.result import CheckResult, worst
from launcher.preflight.state import load_baseline, save_baseline
from launcher.preflight.thresholds import Thresholds
from launcher.preflight.verdict import NodeVerdict

T = TypeVar("T")


def node_name(env: Mapping[str, str] | None = None) -> str:
    """SLURMD_NODENAME inside Slurm, else the short host name."""
    environ = os.environ if env is None else env
    return environ.get("SLURMD_NODENAME") or socket.gethostname().split(".")[0]


@dataclass
class RunOptions:
    """Everything one preflight run needs besides the environment."""

    level: Level
    """quick, standard or deep."""
    expectations: Expectations
    """What the site says a healthy node looks like."""
    thresholds: Thresholds
    """Limits for the checks."""
    state_dir: Path | None
    """Where counter baselines live (None: no baselines, deltas not checked)."""
    mpi_env: Mapping[str, str]
    """Environment for the MPI ping (site mpi.env)."""
    save_baselines: bool = True
    """Write this run's counters to ``state_dir`` (False: this process only reads it, as a
    job reads the state dir root's Slurm scripts write; launcher/preflight/state_access.py)."""


class _Collector:
    """Starts every collector at once; ``get`` waits at most until the shared deadline."""

    def __init__(self, deadline_s: float) -> None:
        self.pool = ThreadPoolExecutor(max_workers=6, thread_name_prefix="preflight")
        self.deadline = time.monotonic() + deadline_s
        self.hung: list[str] = []

    def start(self, fn: Callable[[], T]) -> Future[T]:
        return self.pool.submit(fn)

    def get(self, name: str, future: Future[T], fallback: Callable[[str], T]) -> T:
        try:
            return future.result(timeout=max(0.0, self.deadline - time.monotonic()))
        except FutureTimeout:
            self.hung.append(name)
            return fallback(f"{name} collection did not finish in time (hung)")

    def close(self) -> None:
        self.pool.shutdown(wait=not self.hung, cancel_futures=True)


def collect(
    opts: RunOptions, node: str, env: Mapping[str, str] | None
) -> tuple[NodeFacts, list[str]]:
    """Collect every fact once; returns the facts and the names of collectors that hung."""
    tool_timeout = opts.thresholds.tool_timeout_s
    collector = _Collector(tool_timeout + 5.0)
    gpu_f = collector.start(lambda: collect_gpus(tool_timeout, env))
    log_f = collector.start(lambda: collect_kernel_log(tool_timeout, env))
    ib_f = collector.start(lambda: tuple(collect_ib_ports(env)))
    host_f = collector.start(lambda: collect_host(env))
    disk_f = collector.start(lambda: tuple(collect_disks(opts.expectations.disk_paths)))
    facts = NodeFacts(
        gpu=collector.get("gpu", gpu_f, lambda e: GpuInventory(source="none", error=e)),
        kernel=collector.get("kernel log", log_f, lambda e: KernelLog(error=e)),
        ib_ports=collector.get("ib ports", ib_f, lambda e: ()),
        host=collector.get("host", host_f, lambda e: HostFacts(None, None, None, (), error=e)),
        disks=collector.get("disks", disk_f, lambda e: ()),
        previous=(load_baseline(opts.state_dir, node, set_aside_bad=opts.save_baselines)
                  if opts.state_dir else None),
    )
    collector.close()
    return facts, collector.hung


def _timed(
    check: Callable[[NodeFacts, Expectations, Thresholds], CheckResult],
    facts: NodeFacts,
    opts: RunOptions,
) -> CheckResult:
    start = time.perf_counter()
    result = check(facts, opts.expectations, opts.thresholds)
    return replace(result, duration_s=round(time.perf_counter() - start, 6))


def active_results(
    opts: RunOptions, facts: NodeFacts, env: Mapping[str, str] | None
) -> list[CheckResult]:
    """The active tests the level asks for, by node kind (GPU or CPU-only)."""
    if opts.level == "quick":
        return []
    has_gpu = bool(facts.gpu.gpus) or opts.expectations.gpus_per_node > 0
    if has_gpu and facts.gpu.source.startswith("nvidia-smi") and not facts.gpu.gpus:
        return []  # inventory already failed; nothing to exercise
    results: list[CheckResult] = []
    if has_gpu:
        results += active_checks.gpu_compute_checks(opts.thresholds, env)
        if opts.level == "deep":
            results.append(active_checks.gpu_nccl_check(opts.thresholds, env))
    else:
        results.append(active_checks.cpu_gemm_check(opts.thresholds, env))
        if opts.level == "deep":
            results.append(active_checks.mpi_ping_check(opts.thresholds, env, opts.mpi_env))
    return results


def run_preflight(
    opts: RunOptions, env: Mapping[str, str] | None = None
) -> tuple[NodeVerdict, bool]:
    """Run all checks of ``opts.level`` on this node; returns (verdict, some collector hung)."""
    node = node_name(env)
    started = datetime.datetime.now(datetime.UTC)
    start = time.monotonic()
    facts, hung = collect(opts, node, env)
    results = [_timed(check, facts, opts) for check in (*GPU_CHECKS, *HOST_CHECKS)]
    results += active_results(opts, facts, env)
    if opts.state_dir is not None and opts.save_baselines:
        with contextlib.suppress(
            OSError, WriteError
        ):  # a full or read-only state dir must not fail the node; deltas are simply not kept
            save_baseline(
                opts.state_dir,
                node,
                Baseline(boot_id=facts.kernel.boot_id, counters=current_counters(facts)),
            )
    verdict = NodeVerdict(
        node=node,
        level=opts.level,
        status=worst(r.status for r in results),
        started_at=started.isoformat(timespec="seconds"),
        duration_s=round(time.monotonic() - start, 3),
        gantry_version=launcher.__version__,
        gpu_source=facts.gpu.source,
        checks=results,
    )
    return verdict, bool(hung)


def summary_rows(verdict: NodeVerdict) -> list[dict[str, Any]]:
    """Rows for the human table: id, status, observed, expected/reason."""
    return [
        {
            "id": c.id,
            "status": c.status,
            "observed": c.observed if c.status != "SKIP" else "",
            "expected": c.expected if c.status != "SKIP" else c.reason,
            "action": c.action if c.status in ("WARN", "FAIL", "ERROR") else "",
        }
        for c in verdict.checks
    ]
