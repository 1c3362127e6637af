"""A real embedded Slurm cluster for tests: start one from a generated site file, drive it
with sbatch/srun/squeue/scontrol, stop it. Used by the `embedded_cluster` fixture in
tests/conftest.py (read its docstring first); import the class for type hints:

    from tests.embedded_cluster import EmbeddedCluster

Where things go:
- every cluster gets a fresh directory ``gantry-test-XXXX`` under $GANTRY_TEST_TMPDIR (set
  by scripts/test.sh, which tears down whatever is left there on exit) or /tmp; it holds
  ``site.yaml`` (the generated site) and ``run/`` (the cluster's run dir: configs, logs);
- ports: $GANTRY_TEST_PORT_BASE (controller = base, slurmd = base+1..; the k-th cluster of
  a session adds 16 * k) when set, else the first block of 16 free ports found from
  20000 + (pid % 2000) * 10 on.
The directory is removed after a clean stop unless GANTRY_TEST_KEEP_RUN_DIR=1.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from launcher.cluster.jobs import FINISHED_STATES, JobInfo, parse_show_job
from launcher.cluster.ports import find_free_port_block
from launcher.site_config import DEFAULT_SITE

REPO_ROOT = Path(__file__).resolve().parent.parent
MARKER_ENV = "GANTRY_CLUSTER_RUN_DIR"


class ClusterStartError(RuntimeError):
    """`gantry cluster up` failed; ``run_dir`` holds the logs its message names."""

    def __init__(self, message: str, run_dir: Path) -> None:
        super().__init__(message)
        self.run_dir = run_dir


def run_gantry(*args: str, timeout: float = 180) -> subprocess.CompletedProcess[str]:
    """Run this checkout's `gantry` CLI (python -m launcher) and capture its output."""
    return subprocess.run(
        [sys.executable, "-m", "launcher", *args],
        capture_output=True,
        text=True,
        cwd=REPO_ROOT,
        timeout=timeout,
        check=False,
    )


def cluster_processes(run_dir: Path) -> list[tuple[int, str]]:
    """Live (non-zombie) processes of a cluster: a daemon whose command line names the run
    dir, or anything carrying its run-dir marker in the environment (slurmstepd)."""
    found: list[tuple[int, str]] = []
    needle = str(run_dir)
    marker = f"{MARKER_ENV}={run_dir}".encode()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            stat = (entry / "stat").read_text()
            if stat[stat.rindex(")") + 2] == "Z":
                continue
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
            environ = (entry / "environ").read_bytes().split(b"\0")
        except (OSError, ValueError):
            continue
        if needle in cmdline or marker in environ:
            found.append((int(entry.name), cmdline.strip()))
    return found


@dataclass
class EmbeddedCluster:
    """A running embedded cluster and helpers to use it from tests."""

    site_path: Path
    """The generated site file (pass it as `--site` to gantry commands)."""
    run_dir: Path
    """The cluster's run dir (logs in run_dir/log)."""
    nodes: list[str]
    """Node names, in order."""
    partition: str
    """The default partition."""
    mpi_env: dict[str, str]
    """The site's MPI environment (mpi.env), also contained in `env`."""
    env: dict[str, str] = field(default_factory=dict)
    """os.environ + SLURM_CONF + mpi_env + PYTHONPATH=<repo root>: use it for every Slurm
    command so jobs and ranks import this checkout's `launcher`."""

    @property
    def slurm_conf(self) -> Path:
        return self.run_dir / "etc" / "slurm.conf"

    def run(
        self,
        *argv: str,
        check: bool = True,
        timeout: float = 120,
        env: Mapping[str, str] | None = None,
    ) -> subprocess.CompletedProcess[str]:
        """Run a command (sbatch, srun, salloc, sinfo, ...) against the cluster."""
        full_env = dict(self.env)
        full_env.update(env or {})
        result = subprocess.run(
            list(argv),
            capture_output=True,
            text=True,
            env=full_env,
            timeout=timeout,
            check=False,
        )
        if check and result.returncode != 0:
            raise AssertionError(
                f"{' '.join(argv)} exited {result.returncode}\nstdout: {result.stdout}\n"
                f"stderr: {result.stderr}"
            )
        return result

    def gantry(self, *args: str, timeout: float = 180) -> subprocess.CompletedProcess[str]:
        """Run `gantry <args>` (not adding --site: pass ``"--site", str(site_path)``)."""
        return run_gantry(*args, timeout=timeout)

    def sbatch(self, *args: str, script: str | None = None) -> str:
        """Submit a job (``args`` are sbatch options, e.g. "-N2", "--wrap=hostname"; or a
        ``script`` text written to the run dir); returns the job id."""
        argv = ["sbatch", "--parsable", *args]
        if script is not None:
            path = Path(tempfile.mkstemp(suffix=".sbatch", dir=self.run_dir / "jobs")[1])
            path.write_text(script)
            argv.append(str(path))
        result = self.run(*argv)
        return result.stdout.strip().split(";")[0]

    def srun(self, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        """`srun <args>`, checked (raises with stdout/stderr when it fails)."""
        return self.run("srun", *args, timeout=timeout)

    def squeue_json(self) -> dict[str, Any]:
        """`squeue --json`, parsed."""
        data: dict[str, Any] = json.loads(self.run("squeue", "--json").stdout)
        return data

    def job(self, job_id: str) -> JobInfo:
        """The job's state, reason, exit code and nodes (`scontrol show job -o`)."""
        fields = parse_show_job(self.run("scontrol", "show", "job", "-o", job_id).stdout)
        return JobInfo(
            job_id=job_id,
            state=fields.get("JobState", "UNKNOWN"),
            reason=fields.get("Reason", "None"),
            exit_code=fields.get("ExitCode", "?"),
            nodes=fields.get("NodeList", "(null)"),
        )

    def wait_job(
        self, job_id: str, states: Sequence[str] = tuple(FINISHED_STATES), timeout: float = 120
    ) -> JobInfo:
        """Poll until the job is in one of ``states`` (default: any finished state)."""
        deadline = time.monotonic() + timeout
        while True:
            info = self.job(job_id)
            if info.state in states:
                return info
            if time.monotonic() > deadline:
                raise AssertionError(
                    f"job {job_id} is {info.state} (reason {info.reason}), not one of "
                    f"{sorted(states)} after {timeout} s"
                )
            time.sleep(0.3)

    def scancel(self, *job_ids: str) -> None:
        self.run("scancel", *job_ids, check=False)

    def node_states(self) -> dict[str, str]:
        """Node name -> sinfo's long state (idle, allocated, mixed, completing, drained, ...)."""
        lines = self.run("sinfo", "-h", "-N", "-o", "%N %T").stdout.splitlines()
        return dict(line.split(maxsplit=1) for line in lines if line.strip())

    def _wait_nodes(self, ok: Callable[[str], bool], timeout: float, what: str) -> None:
        deadline = time.monotonic() + timeout
        while True:
            states = self.node_states()
            if states and all(ok(state) for state in states.values()):
                return
            if time.monotonic() > deadline:
                raise AssertionError(f"nodes not {what} after {timeout} s: {states}")
            time.sleep(0.3)

    def wait_all_idle(self, timeout: float = 60) -> None:
        """Wait until every node is idle: no job, not completing, not drained (a test that
        plans on specific nodes, or releases a held requeued job, needs them all free)."""
        self._wait_nodes(lambda state: state == "idle", timeout, "idle")

    def release_requeued(self, job_id: str) -> None:
        """Let a requeued job (held back by Slurm's BeginTime) start in 2 s. Not "now": the
        requeue revokes the job's credential on the nodes with one-second granularity, and a
        restart whose new credential falls in that same second is killed by slurmctld ("Killing
        non-startable batch JobId=N: Job credential revoked", seen in CI)."""
        self.run("scontrol", "update", f"JobId={job_id}", "StartTime=now+2")

    def cancel_all(self, timeout: float = 30) -> None:
        """Cancel every job and wait until the queue is empty and no node is still running or
        completing one (for test isolation: the next test's plan sees free nodes)."""
        ids = self.run("squeue", "-h", "-o", "%A").stdout.split()
        if ids:
            self.scancel(*ids)
        deadline = time.monotonic() + timeout
        while self.run("squeue", "-h", "-o", "%A").stdout.split():
            if time.monotonic() > deadline:
                raise AssertionError("jobs still queued after scancel")
            time.sleep(0.3)
        busy = ("allocated", "mixed", "completing")
        self._wait_nodes(lambda state: not state.startswith(busy), timeout, "free of jobs")


_PORT_BLOCK = 16
_clusters_started = 0


def _port_base() -> int:
    """Ports for the next cluster of this process: $GANTRY_TEST_PORT_BASE + 16 * k for the
    k-th cluster, else a free block."""
    global _clusters_started
    _clusters_started += 1
    configured = os.environ.get("GANTRY_TEST_PORT_BASE")
    if configured:
        return int(configured) + _PORT_BLOCK * (_clusters_started - 1)
    return find_free_port_block(_PORT_BLOCK, start=20000 + (os.getpid() % 2000) * 10)


def write_test_site(
    directory: Path,
    port_base: int,
    overrides: Mapping[str, Any] | None = None,
) -> Path:
    """A copy of site_configs/local.yaml with its own run dir, cluster name and ports;
    ``overrides`` replace whole top-level sections (e.g. {"nodes": {...}}; a "slurm"
    override keeps the test's name, run dir and ports)."""
    data = yaml.safe_load(DEFAULT_SITE.read_text())
    data["name"] = "test"
    for key, value in (overrides or {}).items():
        data[key] = value
    data["slurm"] = {  # the test's own name, run dir and ports win over any override
        **data["slurm"],
        "cluster_name": f"gantry-test-{directory.name[-8:].lower().replace('_', '')}",
        "run_dir": str(directory / "run"),
        "controller_port": port_base,
        "slurmd_port_base": port_base + 1,
    }
    path = directory / "site.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


@contextlib.contextmanager
def start_embedded_cluster(
    overrides: Mapping[str, Any] | None = None, timeout: float = 90
) -> Iterator[EmbeddedCluster]:
    """Bring up a private embedded cluster (see the module docstring), yield it, and tear
    it down (even when the body fails), checking that no process of it survives."""
    base_dir = Path(os.environ.get("GANTRY_TEST_TMPDIR") or tempfile.gettempdir())
    base_dir.mkdir(parents=True, exist_ok=True)
    directory = Path(tempfile.mkdtemp(prefix="gantry-test-", dir=base_dir))
    directory.chmod(0o755)  # munged (user munge) must reach its socket dir
    site_path = write_test_site(directory, _port_base(), overrides)
    site = yaml.safe_load(site_path.read_text())
    run_dir = directory / "run"
    up = run_gantry("cluster", "up", "--site", str(site_path), "--timeout", str(timeout))
    try:
        if up.returncode != 0:
            raise ClusterStartError(
                f"gantry cluster up failed (exit {up.returncode}): {up.stderr.strip()} "
                f"[site {site_path}]",
                run_dir,
            )
        from topology.hostlists import expand

        mpi_env = {str(k): str(v) for k, v in site.get("mpi", {}).get("env", {}).items()}
        env = dict(os.environ)
        env.update(mpi_env)
        env["SLURM_CONF"] = str(run_dir / "etc" / "slurm.conf")
        env["PYTHONPATH"] = os.pathsep.join(
            p for p in (str(REPO_ROOT), os.environ.get("PYTHONPATH", "")) if p
        )
        yield EmbeddedCluster(
            site_path=site_path,
            run_dir=run_dir,
            nodes=expand(site["nodes"]["names"]),
            partition=site["slurm"]["partition"],
            mpi_env=mpi_env,
            env=env,
        )
    finally:
        down = run_gantry("cluster", "down", "--site", str(site_path))
        leftovers = cluster_processes(run_dir)
        clean = down.returncode == 0 and not leftovers and up.returncode == 0
        if clean and os.environ.get("GANTRY_TEST_KEEP_RUN_DIR") != "1":
            shutil.rmtree(directory, ignore_errors=True)
        if leftovers or (down.returncode != 0 and up.returncode == 0):
            raise RuntimeError(
                f"gantry cluster down left the cluster in {run_dir} running: "
                f"exit {down.returncode} {down.stderr.strip()}; processes {leftovers}"
            )
