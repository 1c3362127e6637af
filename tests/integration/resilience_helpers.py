"""Helpers of the resilience tests: a tiny pp=2 job submitted with `gantry submit` (the real
batch script running `gantry train --resume` through srun), waiting on metrics, killing a
node's daemons and ranks, and recording recovery times (runs/resilience_recovery.jsonl)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from tests.embedded_cluster import EmbeddedCluster

REPO = Path(__file__).resolve().parents[2]
RECOVERY_LOG = REPO / "runs" / "resilience_recovery.jsonl"
STEPS = 8


def job_body(name: str, *, env: dict[str, str] | None = None, spares: int = 0,
             hang_timeout_s: float = 30, max_restarts: int = 2,
             recover_in_allocation: bool = True) -> dict[str, Any]:
    """The test job: 2 layers split over pp=2 ranks on 2 nodes, 8 steps, a checkpoint every
    2 steps (kept: 2), written in the background; ``recover_in_allocation`` False takes the
    requeue path after every failure."""
    return {
        "name": name,
        "model": {"n_layer": 2, "n_head": 2, "n_embd": 8, "vocab_size": 32, "seq_len": 4},
        "parallelism": {"pp": 2, "dp": 1, "schedule": "1f1b", "micro_batches": 2,
                        "micro_batch_size": 1},
        "train": {"steps": STEPS, "lr": 1.0e-2, "seed": 11},
        "checkpoint": {"dir": "ckpt", "interval": 2, "keep": 2, "async_write": True},
        "resources": {"nodes": 2, "spares": spares, "time_limit": "00:10:00"},
        "policy": {"preflight_level": "off", "max_restarts": max_restarts,
                   "hang_timeout_s": hang_timeout_s,
                   "recover_in_allocation": recover_in_allocation},
        "env": {"OMP_NUM_THREADS": "1", **(env or {})},
    }


def gantry(cluster: EmbeddedCluster, cwd: Path, *args: str,
           timeout: float = 300) -> subprocess.CompletedProcess[str]:
    env = {**cluster.env, "GANTRY_JOBS_DIR": str(cwd / "jobs")}
    return subprocess.run([sys.executable, "-m", "launcher", *args], capture_output=True,
                          text=True, cwd=cwd, env=env, timeout=timeout, check=False)


@dataclass
class Job:
    """A submitted job and where its files are."""

    cluster: EmbeddedCluster
    cwd: Path
    job_id: str
    job_dir: Path
    name: str

    @property
    def run_dir(self) -> Path:
        return self.job_dir / "runs" / self.name

    def status(self) -> dict[str, Any]:
        result = gantry(self.cluster, self.cwd, "status", self.job_id, "--json")
        assert result.returncode == 0, result.stderr
        data: dict[str, Any] = json.loads(result.stdout)
        return data

    def log(self) -> str:
        return gantry(self.cluster, self.cwd, "logs", self.job_id).stdout

    def metrics(self) -> list[dict[str, Any]]:
        path = self.run_dir / "metrics.jsonl"
        if not path.is_file():
            return []
        return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]

    def events(self) -> list[dict[str, Any]]:
        path = self.run_dir / "events.jsonl"
        return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]

    def trajectory(self) -> list[tuple[int, float, float]]:
        return [(r["step"], r["loss"], r["grad_norm"]) for r in self.metrics()]

    def launch_nodes(self, restart: int) -> list[str]:
        path = self.job_dir / "runs" / f"{self.job_id}-{restart}" / "launch_nodes"
        return path.read_text().strip().split(",")

    def wait_step(self, step: int, timeout: float = 240) -> None:
        wait_for(lambda: any(r["step"] >= step for r in self.metrics()),
                 f"job {self.job_id} to report step {step}", timeout, self.log)

    def wait_done(self, timeout: float = 300) -> dict[str, Any]:
        finished = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY"}
        box: dict[str, Any] = {}

        def done() -> bool:
            box.update(self.status())
            return box["state"] in finished and bool(box.get("terminal", True))

        wait_for(done, f"job {self.job_id} to finish", timeout, self.log)
        return box


def submit(cluster: EmbeddedCluster, cwd: Path, body: dict[str, Any],
           site: Path | None = None) -> Job:
    """``gantry submit`` of ``body`` on the cluster's site (or ``site``)."""
    path = cwd / f"{body['name']}.yaml"
    path.write_text(yaml.safe_dump(body))
    result = gantry(cluster, cwd, "submit", str(path), "--site",
                    str(site or cluster.site_path), "--json")
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    return Job(cluster, cwd, data["job_id"], Path(data["job_dir"]), body["name"])


def uninterrupted_run(cluster: EmbeddedCluster, cwd: Path,
                      body: dict[str, Any] | None = None) -> Job:
    """The test job (or ``body``, a job without fault hooks) run without a fault, checked to
    finish every step in its first attempt (the trajectory every recovered run must equal)."""
    job = submit(cluster, cwd, body or job_body("reference"))
    info = job.wait_done()
    steps = (body or {}).get("train", {}).get("steps", STEPS)
    assert info["state"] == "COMPLETED" and info["restarts"] == 0, job.log()
    assert [step for step, _, _ in job.trajectory()] == list(range(1, steps + 1))
    return job


def wait_for(check: Callable[[], bool], what: str, timeout: float,
             context: Callable[[], str] | None = None) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.5)
    detail = context()[-4000:] if context is not None else ""
    raise AssertionError(f"timed out after {timeout} s waiting for {what}\n{detail}")


def _ppid(pid: int) -> int:
    stat = Path(f"/proc/{pid}/stat").read_text()
    return int(stat[stat.rindex(")") + 2 :].split()[1])


def kill_node(cluster: EmbeddedCluster, node: str, job_id: str) -> list[int]:
    """kill -9 of everything that makes ``node`` alive for ``job_id``: its slurmd, the
    slurmstepd of each step task on it, and the tasks (ranks). Returns the pids killed."""
    record = json.loads((cluster.run_dir / "pids" / f"slurmd-{node}.pid").read_text())
    victims = {int(record["pid"])}
    wanted = (f"SLURMD_NODENAME={node}".encode(), f"SLURM_JOB_ID={job_id}".encode())
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            environ = (entry / "environ").read_bytes().split(b"\0")
            in_step = any(e.startswith(b"SLURM_STEP_ID=") for e in environ)
            if in_step and all(w in environ for w in wanted):
                pid = int(entry.name)
                victims.update({pid, _ppid(pid)})  # the rank and its slurmstepd
        except (OSError, ValueError):
            continue
    killed = []
    for pid in sorted(victims):
        try:
            os.kill(pid, signal.SIGKILL)
            killed.append(pid)
        except ProcessLookupError:
            pass
    return killed


def recovery_seconds(job: Job, fault_time: float) -> tuple[float, int]:
    """(seconds from the fault to the first step finished after the resume, steps re-run)."""
    starts = [e for e in job.events() if e["event"] == "start" and e["time"] > fault_time]
    assert starts, f"no training start after the fault: {job.events()}"
    resumed_at = int(starts[0]["step"])
    first = next(r for r in job.metrics() if r["step"] == resumed_at + 1)
    replayed = job.run_dir / "metrics.replayed.jsonl"
    redone = len(replayed.read_text().splitlines()) if replayed.is_file() else 0
    return float(first["time"]) - fault_time, redone


def record_recovery(fault: str, job: Job, fault_time: float, **extra: Any) -> float:
    seconds, redone = recovery_seconds(job, fault_time)
    RECOVERY_LOG.parent.mkdir(parents=True, exist_ok=True)
    entry = {"fault": fault, "recovery_s": round(seconds, 2), "steps_redone": redone,
             "job": job.job_id, "date": time.strftime("%Y-%m-%dT%H:%M:%S"), **extra}
    with open(RECOVERY_LOG, "a", encoding="utf-8") as handle:
        handle.write(json.dumps(entry, sort_keys=True) + "\n")
    sys.stderr.write(f"recovery {fault}: {entry}\n")
    return seconds


def fault_marker_time(job: Job, name: str) -> float:
    """When a fault hook fired (its fire-once marker in the job dir)."""
    text = (job.job_dir / f"fault-{name}.fired").read_text()
    return float(text.split()[0])
