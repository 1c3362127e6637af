"""The example DDP script (examples/ddp/train_ddp.py) as a command job in both launch modes.

On the embedded cluster: 4 nodes + 1 spare, quick preflight, and the first planned node's
InfiniBand port down (the demo's fake sysfs, GANTRY_SYSFS_ROOT; a subdirectory named after
the node wins). The gate drains that node and the spare takes its place; the first node the
gate kept hosts rank 0, MASTER_ADDR and the rendezvous; the script trains on gloo. Its loss
trajectory must equal the same script under a local ``torchrun --standalone`` with the same
seed and world size, exactly: rank R trains on slice R of each step's global batch, in every
mode. `gantry logs JOB --rank R` shows exactly the lines rank R printed (its RANK), in every
mode and under mpirun.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from launcher.demo.faults import write_fake_sysfs
from launcher.demo.plan import demo_placement
from launcher.slurm import CommandRunner, make_client
from tests.embedded_cluster import EmbeddedCluster

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "examples" / "ddp" / "train_ddp.py"
STEPS = 8
WORLD = 4
ARGS = ("--steps", str(STEPS), "--global-batch", "32", "--seed", "7")


def losses(path: Path) -> list[float]:
    return [json.loads(line)["loss"] for line in path.read_text().splitlines()]


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> list[float]:
    """The script under `torchrun --standalone` with the same world size and seed."""
    out = tmp_path_factory.mktemp("reference") / "losses.jsonl"
    result = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone",
         f"--nproc-per-node={WORLD}", str(SCRIPT), *ARGS, "--out", str(out)],
        capture_output=True, text=True,
        env={**_plain_env(), "OMP_NUM_THREADS": "1", "TMPDIR": str(out.parent)},  # torchelastic_*
        timeout=300, check=False)
    assert result.returncode == 0, result.stderr[-3000:]
    values = losses(out)
    assert len(values) == STEPS and values[-1] < values[0]
    return values


def _plain_env() -> dict[str, str]:
    """This process's environment without a launcher's rank variables."""
    return {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "OMPI_"))}


def gantry(cluster: EmbeddedCluster, cwd: Path, *args: str,
           timeout: float = 400) -> subprocess.CompletedProcess[str]:
    env = {**cluster.env, "GANTRY_JOBS_DIR": str(cwd / "jobs")}
    return subprocess.run([sys.executable, "-m", "launcher", *args], capture_output=True,
                          text=True, cwd=cwd, env=env, timeout=timeout, check=False)


def rank_lines(cluster: EmbeddedCluster, cwd: Path, job_id: str, rank: int) -> list[str]:
    """`gantry logs JOB --rank N`: the lines rank N printed (labels removed)."""
    shown = gantry(cluster, cwd, "logs", job_id, "--rank", str(rank), timeout=60)
    assert shown.returncode == 0 and shown.stderr == "", shown.stderr
    return shown.stdout.splitlines()


def write_job(tmp_path: Path, mode: str, sysfs: Path) -> tuple[Path, Path]:
    out = tmp_path / "losses.jsonl"
    body: dict[str, Any] = {
        "name": f"ddp-{mode}",
        "resources": {"nodes": WORLD, "spares": 1, "time_limit": "00:10:00"},
        "policy": {"preflight_level": "quick", "max_restarts": 0},
        "launch": mode,
        "command": [sys.executable, str(SCRIPT), *ARGS, "--out", str(out)],
        "env": {"OMP_NUM_THREADS": "1", "GANTRY_SYSFS_ROOT": str(sysfs),
                "GANTRY_STATE_DIR": str(tmp_path / "preflight-state")},
    }
    path = tmp_path / f"ddp-{mode}.yaml"
    path.write_text(yaml.safe_dump(body, sort_keys=False))
    return path, out


@pytest.mark.parametrize("mode", ["per-rank", "torchrun"])
def test_ddp_trains_on_the_spare_like_torchrun_standalone(
        embedded_cluster: EmbeddedCluster, tmp_path: Path, reference: list[float],
        mode: str) -> None:
    cluster = embedded_cluster
    # The plan below must be the one submit makes: no node still drained or busy from
    # an earlier test (its RESUME takes a moment to show).
    cluster.wait_all_idle()
    job, out = write_job(tmp_path, mode, tmp_path / "sysfs")
    client = make_client("cli", runner=CommandRunner(env=cluster.env))
    placement = demo_placement(job, cluster.site_path, client)
    broken, spare = placement.rank_nodes[0], placement.spare_nodes[0]
    write_fake_sysfs(tmp_path / "sysfs", [broken])
    try:
        result = gantry(cluster, tmp_path, "submit", str(job), "--site",
                        str(cluster.site_path), "--follow")
        assert result.returncode == 0, (result.stdout[-4000:], result.stderr[-3000:])
        assert "training finished" in result.stdout
        assert f"step {STEPS}/{STEPS} loss" in result.stdout  # the live view shows them
        job_id = result.stdout.split()[2]
        job_dir = Path(result.stdout.split(": ", 1)[1].splitlines()[0])

        # The spare trains in the broken node's place (the gate lists the nodes in
        # allocation order); the first of them hosts rank 0 and the rendezvous.
        launch = (job_dir / "runs" / f"{job_id}-0" / "launch_nodes").read_text().strip()
        kept = sorted([spare, *placement.rank_nodes[1:]], key=cluster.nodes.index)
        assert launch.split(",") == kept
        log = (job_dir / "logs" / f"slurm-{job_id}.out").read_text()
        assert "rendezvous MASTER_ADDR=localhost MASTER_PORT=" in log
        assert f"(node {kept[0]})" in log
        # Every rank's lines carry its label: srun's task number (= RANK in per-rank mode),
        # under torchrun the agent's (node's) task number and the worker's global rank.
        own = {rank: rank_lines(cluster, tmp_path, job_id, rank) for rank in range(WORLD)}
        nodes = []
        for rank, lines in own.items():
            assert lines, (rank, log[-3000:])
            node = re.fullmatch(rf"rank {rank}/{WORLD} local 0 on \S+ node (\S+) .*",
                                lines[0])
            assert node is not None, (rank, lines)  # the line this rank printed, first
            nodes.append(node.group(1))
            assert not any(line.startswith("rank ") for line in lines[1:]), lines
            last_step = any(line.startswith(f"step {STEPS}/{STEPS} loss ") for line in lines)
            assert last_step == (rank == 0), lines
            assert len(lines) == (STEPS + 2 if rank == 0 else 1), lines
            if mode == "per-rank":  # RANK follows the launch nodes, as srun numbers tasks
                assert node.group(1) == kept[rank]
                assert f"\n{rank}: {lines[0]}\n" in log
            else:  # torchrun's c10d rendezvous numbers the ranks itself
                task = kept.index(node.group(1))
                assert f"\n{task}: [torchrun:{rank}] {lines[0]}\n" in log
        assert sorted(nodes) == sorted(kept)
        states = {n.name: n for n in client.node_states([broken])}
        assert states[broken].reason is not None
        assert states[broken].reason.startswith("gantry:net.ib_ports:")

        assert losses(out) == reference  # exactly, on CPU/gloo

        status = gantry(cluster, tmp_path, "status", job_id, "--json")
        assert status.returncode == 0, status.stderr
        assert json.loads(status.stdout)["state"] == "COMPLETED"
        logs = gantry(cluster, tmp_path, "logs", job_id)
        assert f"step {STEPS}/{STEPS} loss" in logs.stdout
    finally:
        cluster.cancel_all()
        cluster.run("scontrol", "update", f"NodeName={broken}", "State=RESUME", check=False)


def test_per_rank_under_mpirun_two_ranks_a_node(embedded_cluster: EmbeddedCluster,
                                                 tmp_path: Path,
                                                 reference: list[float]) -> None:
    """A site launching with mpirun, 2 nodes x 2 ranks: each rank's local rank comes from
    Open MPI (it inherits SLURM_LOCALID 0 of the orted srun started), and the losses are
    the same world size's as before."""
    cluster = embedded_cluster
    cluster.wait_all_idle()
    site = yaml.safe_load(cluster.site_path.read_text())
    site["mpi"]["launcher"] = "mpirun"
    site["mpi"]["env"] = {**site["mpi"]["env"], "OMPI_ALLOW_RUN_AS_ROOT": "1",
                          "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1"}
    site_path = tmp_path / "mpirun-site.yaml"
    site_path.write_text(yaml.safe_dump(site, sort_keys=False))
    out = tmp_path / "losses.jsonl"
    job = tmp_path / "ddp-mpirun.yaml"
    job.write_text(yaml.safe_dump({
        "name": "ddp-mpirun",
        "resources": {"nodes": 2, "gpus_per_node": 2, "time_limit": "00:10:00"},
        "policy": {"preflight_level": "off", "max_restarts": 0},
        "command": [sys.executable, str(SCRIPT), *ARGS, "--out", str(out)],
        "env": {"OMP_NUM_THREADS": "1"},
    }, sort_keys=False))
    try:
        result = gantry(cluster, tmp_path, "submit", str(job), "--site", str(site_path),
                        "--follow")
        assert result.returncode == 0, (result.stdout[-4000:], result.stderr[-3000:])
        job_id = result.stdout.split()[2]
        job_dir = Path(result.stdout.split(": ", 1)[1].splitlines()[0])
        first, second = (job_dir / "runs" / f"{job_id}-0" / "launch_nodes").read_text() \
            .strip().split(",")
        # Open MPI tags each piece a rank wrote ([1,R]<stdout>:); `logs --rank` joins a
        # rank's pieces back into its lines.
        where = {0: ("0", first), 1: ("1", first), 2: ("0", second), 3: ("1", second)}
        for rank, (local, node) in where.items():
            lines = rank_lines(cluster, tmp_path, job_id, rank)
            assert re.fullmatch(rf"rank {rank}/4 local {local} on \S+ node {node} .*",
                                lines[0]), (rank, lines)
            assert len(lines) == (STEPS + 2 if rank == 0 else 1), lines
        followed = gantry(cluster, tmp_path, "logs", job_id, "-f", "--rank", "3", timeout=60)
        assert followed.returncode == 0, followed.stderr
        assert followed.stdout.splitlines() == rank_lines(cluster, tmp_path, job_id, 3)
        assert losses(out) == reference
    finally:
        cluster.cancel_all()
