"""The run monitor on the real embedded cluster: a fault appearing mid-run on one training node
is seen, the node evicted, drained and swapped for a spare, and the job's trajectory stays
the uninterrupted run's bit for bit.

Every node's nvidia-smi, dmesg and sysfs are the tool-path overrides real sites get
(GANTRY_NVIDIA_SMI with a recorded H200 output per node, GANTRY_DMESG, GANTRY_SYSFS_ROOT with a
subdirectory per node). Mid-run (steps slowed by GANTRY_FAULT_STEP_DELAY_S, the monitor
sampling every 0.5 s), one of: (a) an Xid 79 line appears in rank 1's node's kernel log,
(b) that node's recorded nvidia-smi output is swapped for one with more remapped rows, (c) its
IB port's link_downed counter rises. Each is seen by the first or second sample after it
(within two monitor intervals), the ranks checkpoint and stop, `gantry recover` drains the
node ``gantry:run:health-...`` and the spare that is not drained by an "operator" takes its
place; the operator's drain is left as it was.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.embedded_cluster import EmbeddedCluster
from tests.integration.monitor_helpers import FAULTS, fault_tools, health_events, reasons, xid79
from tests.integration.resilience_helpers import (
    gantry,
    job_body,
    submit,
    uninterrupted_run,
    wait_for,
)

pytestmark = pytest.mark.slow

Trajectory = list[tuple[int, float, float]]
INTERVAL_S = 0.5
OPERATOR_REASON = "operator: PSU swap pending"


def tools(tmp: Path, nodes: list[str]) -> dict[str, str]:
    """The recorded health tools of every node, and steps slowed so the fault lands mid-run."""
    return {**fault_tools(tmp, nodes), "GANTRY_FAULT_STEP_DELAY_S": "1.0"}


@pytest.fixture(scope="module")
def cluster(embedded_cluster: EmbeddedCluster,
            tmp_path_factory: pytest.TempPathFactory) -> EmbeddedCluster:
    built = gantry(embedded_cluster, tmp_path_factory.mktemp("build"), "build", "--site",
                   str(embedded_cluster.site_path), timeout=600)
    assert built.returncode == 0, built.stderr
    return embedded_cluster


@pytest.fixture(autouse=True)
def _resume_nodes(request: pytest.FixtureRequest) -> Iterator[None]:
    yield
    cluster: EmbeddedCluster = request.getfixturevalue("cluster")
    cluster.cancel_all()
    for node in reasons(cluster):
        cluster.run("scontrol", "update", f"NodeName={node}", "State=RESUME", check=False)


@pytest.fixture(scope="module")
def reference(cluster: EmbeddedCluster, tmp_path_factory: pytest.TempPathFactory) -> Trajectory:
    return uninterrupted_run(cluster, tmp_path_factory.mktemp("reference")).trajectory()


@pytest.mark.parametrize("fault", sorted(FAULTS))
def test_a_fault_seen_mid_run_swaps_the_node(cluster: EmbeddedCluster, reference: Trajectory,
                                             tmp_path: Path, fault: str) -> None:
    inject, check, what = FAULTS[fault]
    nodes = [f"n{i}" for i in range(1, 9)]
    body = job_body(f"monitor-{fault}", spares=2, env=tools(tmp_path, nodes))
    body["policy"]["monitor_interval_s"] = INTERVAL_S
    job = submit(cluster, tmp_path, body)
    first = f"{job.job_id}-0"
    wait_for(lambda: (job.job_dir / "runs" / first / "launch_nodes").is_file(),
             "the launch nodes", 120, job.log)
    launch = job.launch_nodes(0)
    victim = launch[1]
    allocated = cluster.run("squeue", "-h", "-j", job.job_id, "-o", "%N").stdout.strip()
    spares = [n for n in cluster.run("scontrol", "show", "hostnames", allocated).stdout.split()
              if n not in launch]
    assert len(spares) == 2, (allocated, launch)
    # An operator drains one spare while the job runs: it is neither used nor touched.
    cluster.run("scontrol", "update", f"NodeName={spares[0]}", "State=DRAIN",
                f"Reason={OPERATOR_REASON}")
    wait_for(lambda: {e["node"] for e in health_events(job, first)
                      if e.get("event") == "start"} == set(launch),
             "a monitor on every launch node", 120, job.log)
    job.wait_step(1)
    inject(tmp_path, victim)
    injected = time.time()

    info = job.wait_done()
    log = job.log()
    assert (info["state"], info["restarts"]) == ("COMPLETED", 0), log
    assert job.trajectory() == reference, log  # bit-exact, every step
    seen = [e for e in health_events(job, first) if e["grade"] == "FAIL"]
    assert seen and {e["node"] for e in seen} == {victim}, seen
    assert {e["check"] for e in seen} == {check}, seen
    # Seen by the first or second sample after the fault: the sample before the one that
    # saw it began before the fault was in place.
    assert seen[0]["previous_at"] <= injected, (seen[0], injected)
    sys.stderr.write(f"monitor {fault}: seen {seen[0]['time'] - injected:.2f} s after the "
                     f"fault (interval {INTERVAL_S} s)\n")
    [line] = [json.loads(x) for x in (job.job_dir / "recoveries.jsonl").read_text().splitlines()]
    assert line["culprits"] == {victim: what}, line
    assert line["evidence"].startswith(f"eviction requested: {victim} by the health check")
    assert line["replaced"] == {victim: spares[1]}, line
    assert line["decision"] == "relaunch"
    events = [e for e in job.events() if e["event"] == "evict"]
    assert [e["nodes"] for e in events] == [{victim: what}] and events[0]["checkpointed"]
    shown = reasons(cluster)
    assert shown.get(victim) == f"gantry:run:{what}", shown
    assert shown.get(spares[0]) == OPERATOR_REASON, shown  # untouched
    later = (job.job_dir / "runs" / f"{job.job_id}-0.1" / "launch_nodes").read_text().split(",")
    assert sorted(n.strip() for n in later) == sorted([launch[0], spares[1]]), later
    assert "recovery 1 of 3 in this allocation" in log, log


def test_without_recovery_in_the_allocation_the_job_requeues_without_the_node(
        cluster: EmbeddedCluster, reference: Trajectory, tmp_path: Path) -> None:
    nodes = [f"n{i}" for i in range(1, 9)]
    body = job_body("monitor-requeue", env=tools(tmp_path, nodes),
                    recover_in_allocation=False)
    body["policy"]["monitor_interval_s"] = INTERVAL_S
    job = submit(cluster, tmp_path, body)
    first = f"{job.job_id}-0"
    wait_for(lambda: (job.job_dir / "runs" / first / "launch_nodes").is_file(),
             "the launch nodes", 120, job.log)
    victim = job.launch_nodes(0)[1]
    wait_for(lambda: len({e["node"] for e in health_events(job, first)
                          if e.get("event") == "start"}) == 2,
             "a monitor on every launch node", 120, job.log)
    job.wait_step(1)
    xid79(tmp_path, victim)

    info = job.wait_done()
    log = job.log()
    assert (info["state"], info["restarts"]) == ("COMPLETED", 1), log
    assert job.trajectory() == reference, log
    assert "requeued by gantry recover without the evicted node" in log, log
    [line] = [json.loads(x) for x in (job.job_dir / "recoveries.jsonl").read_text().splitlines()]
    assert (line["decision"], line["culprits"]) == ("requeue", {victim: "health-xid-79"}), line
    assert victim not in job.launch_nodes(1)
    assert reasons(cluster).get(victim) == "gantry:run:health-xid-79"
