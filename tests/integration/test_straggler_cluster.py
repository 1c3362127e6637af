"""A slow node is found from the per-rank timers on the real embedded cluster, and swapped out.

The job: a tiny GPT-2, pp=2 x dp=2 on 4 nodes plus 1 spare, 12 steps, checkpoints, the
straggler window 4 steps. ``GANTRY_FAULT_SLOW_NODE`` slows the node of rank 2 (replica 1,
stage 0: it has one same-shape peer, rank 0) by 0.2 s a step. With ``warn`` the rank is
flagged within the window after the warm-up (one record in stragglers.jsonl, shown by the
live view, `gantry status` and the report) and the job runs on; with ``swap`` the node is
evicted after the step it was flagged at, drained ``gantry:run:straggler-slow-compute`` and
replaced by the spare inside the allocation, the steps after the relaunch carry no delay on
any rank, and the loss trajectory equals the uninterrupted run's bit-exactly. The
uninterrupted run itself finds no straggler.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from launcher.demo.plan import demo_placement
from launcher.slurm import CommandRunner, make_client
from tests.embedded_cluster import EmbeddedCluster
from tests.integration.resilience_helpers import Job, gantry, submit, uninterrupted_run

pytestmark = pytest.mark.slow

STEPS = 12
WINDOW = 4
WARMUP = 3  # launcher/train/straggler.py's WARMUP_STEPS
DELAY_S = 0.2
Trajectory = list[tuple[int, float, float]]


def body(name: str, action: str = "warn", slow_node: str | None = None) -> dict[str, Any]:
    return {
        "name": name,
        "model": {"n_layer": 2, "n_head": 2, "n_embd": 8, "vocab_size": 32, "seq_len": 4},
        "parallelism": {"pp": 2, "dp": 2, "schedule": "1f1b", "micro_batches": 2,
                        "micro_batch_size": 1},
        "train": {"steps": STEPS, "lr": 1.0e-2, "seed": 11},
        "checkpoint": {"dir": "ckpt", "interval": 4, "keep": 2, "async_write": True},
        "resources": {"nodes": 4, "spares": 1, "time_limit": "00:10:00"},
        "policy": {"preflight_level": "off", "max_restarts": 1, "hang_timeout_s": 30,
                   "straggler_action": action, "straggler_window_steps": WINDOW,
                   # well below the injected delay, well above a loaded host's jitter
                   "straggler_min_excess_s": DELAY_S / 4},
        "env": {"OMP_NUM_THREADS": "1",
                **({"GANTRY_FAULT_SLOW_NODE": f"{slow_node}:{DELAY_S}"} if slow_node else {})},
    }


@pytest.fixture(scope="module")
def cluster(embedded_cluster: EmbeddedCluster,
            tmp_path_factory: pytest.TempPathFactory) -> EmbeddedCluster:
    built = gantry(embedded_cluster, tmp_path_factory.mktemp("build"), "build", "--site",
                   str(embedded_cluster.site_path), timeout=600)
    assert built.returncode == 0, built.stderr
    return embedded_cluster


def drained(cluster: EmbeddedCluster) -> dict[str, str]:
    shown = cluster.run("sinfo", "-h", "-R", "-N", "-o", "%N|%E").stdout
    return {node: reason for line in shown.splitlines() if "|" in line
            for node, reason in [line.split("|", 1)]}


@pytest.fixture(autouse=True)
def _healthy_nodes(cluster: EmbeddedCluster) -> Iterator[None]:
    cluster.wait_all_idle()  # the plan below must be the one submit makes
    yield
    cluster.cancel_all()
    for node, reason in drained(cluster).items():
        if reason.startswith("gantry:"):  # only gantry's own drains
            cluster.run("scontrol", "update", f"NodeName={node}", "State=RESUME")
    cluster.wait_all_idle()


@pytest.fixture(scope="module")
def reference(cluster: EmbeddedCluster, tmp_path_factory: pytest.TempPathFactory) -> Trajectory:
    job = uninterrupted_run(cluster, tmp_path_factory.mktemp("reference"), body("reference"))
    assert not (job.job_dir / "stragglers.jsonl").exists()  # a healthy run has none
    return job.trajectory()


def slow_node(cluster: EmbeddedCluster, path: Path) -> tuple[str, str]:
    """(the planned node of rank 2, the planned spare) of the job in ``path``."""
    client = make_client("cli", runner=CommandRunner(env=cluster.env))
    placement = demo_placement(path, cluster.site_path, client)
    return placement.rank_nodes[2], placement.spare_nodes[0]


def stragglers(job: Job) -> list[dict[str, Any]]:
    path = job.job_dir / "stragglers.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.is_file() \
        else []


def test_a_slow_node_is_flagged_and_shown(cluster: EmbeddedCluster, reference: Trajectory,
                                          tmp_path: Path) -> None:
    path = tmp_path / "warn.yaml"
    path.write_text(yaml.safe_dump(body("warn")))
    slow, _ = slow_node(cluster, path)
    path.write_text(yaml.safe_dump(body("warn", slow_node=slow)))
    result = gantry(cluster, tmp_path, "submit", str(path), "--site", str(cluster.site_path),
                    "--follow")
    assert result.returncode == 0, (result.stdout[-4000:], result.stderr[-3000:])
    job_id = result.stdout.split()[2]
    job_dir = Path(result.stdout.split(": ", 1)[1].splitlines()[0])
    job = Job(cluster, tmp_path, job_id, job_dir, "warn")
    [found] = stragglers(job)
    assert (found["event"], found["rank"], found["node"]) == ("straggler", 2, slow), found
    assert found["step"] == WARMUP + WINDOW <= 20 and found["window"] == WINDOW
    assert found["basis"] == "peers" and found["peers"] == 1 and found["action"] == "warn"
    assert found["compute_s"] >= DELAY_S > found["reference_s"] and found["ratio"] > 1.2
    assert found["attempt"] == f"{job_id}-0"
    line = f"{slow} (rank 2) slow at step {WARMUP + WINDOW}: compute "
    assert f"straggler {line}" in result.stdout  # the live view, as it happened
    shown = gantry(cluster, tmp_path, "status", job_id).stdout
    assert f"straggler  {line}" in shown, shown
    made = gantry(cluster, tmp_path, "report", job_id, "--json")
    assert made.returncode == 0, made.stderr
    report = json.loads(made.stdout)
    assert len(report["stragglers"]) == 1 and report["stragglers"][0].startswith(line)
    assert line in Path(report["html"]).read_text()
    # warn only: the job ran on where it was, and trained as the uninterrupted run did
    assert job.status()["restarts"] == 0 and job.status()["recoveries"] == []
    assert job.trajectory() == reference


def test_a_slow_node_is_swapped_for_the_spare(cluster: EmbeddedCluster, reference: Trajectory,
                                              tmp_path: Path) -> None:
    path = tmp_path / "swap.yaml"
    path.write_text(yaml.safe_dump(body("swap", "swap")))
    slow, spare = slow_node(cluster, path)
    job = submit(cluster, tmp_path, body("swap", "swap", slow_node=slow))
    info = job.wait_done()
    log = job.log()
    assert (info["state"], info["restarts"]) == ("COMPLETED", 0), log
    [found] = stragglers(job)
    flagged_at = WARMUP + WINDOW
    assert (found["rank"], found["node"], found["step"]) == (2, slow, flagged_at), found
    assert found["swap"] == "requested", found
    [line] = [json.loads(text) for text in
              (job.job_dir / "recoveries.jsonl").read_text().splitlines()]
    assert line["decision"] == "relaunch" and line["culprits"] == {
        slow: "straggler-slow-compute"}, line
    assert line["replaced"] == {slow: spare}, line
    assert drained(cluster).get(slow) == "gantry:run:straggler-slow-compute"
    relaunch = job.job_dir / "runs" / f"{job.job_id}-0.1"
    nodes = (relaunch / "launch_nodes").read_text().strip().split(",")
    assert slow not in nodes and spare in nodes, nodes
    # the step it was flagged at was checkpointed; the relaunch resumed there
    starts = [e for e in job.events() if e["event"] == "start"]
    assert [e["step"] for e in starts] == [0, flagged_at], starts
    records = job.metrics()
    before = [r for r in records if r["step"] <= flagged_at]
    after = [r for r in records if r["step"] > flagged_at]
    assert all(r["ranks"][2]["compute_s"] >= DELAY_S for r in before)
    assert after and all(t["compute_s"] < DELAY_S / 2 for r in after for t in r["ranks"])
    assert job.trajectory() == reference, log  # bit-exact: loss and grad norm of every step
    shown = gantry(cluster, tmp_path, "status", job.job_id).stdout
    assert f"straggler  {slow} (rank 2) slow at step {flagged_at}" in shown, shown
    assert "; swap requested" in shown and "recovery" in shown, shown
