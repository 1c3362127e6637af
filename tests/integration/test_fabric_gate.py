"""The gate's fabric test on the real embedded cluster: the batch script runs `gantry preflight
fabric` over the nodes that passed the node checks (srun --mpi=pmix, mpi4py over TCP), then
the gate judges it.

- A healthy allocation (2 rank nodes + 1 spare) passes and the job trains.
- One node's transfers slowed (GANTRY_FAULT_SLOW_FABRIC, the test-only hook): the fabric
  verdict names it, the gate drains it with gantry's reason and the spare trains in its
  place; the nodes an operator drained (which leave the job exactly three nodes) keep their
  reason.
Both jobs use a private state dir and a drain rate limit that allows one drain.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.embedded_cluster import EmbeddedCluster
from tests.integration.resilience_helpers import STEPS, Job, gantry, job_body

OPERATOR_REASON = "operator: cable swap pending"
SLOW = "n2"


@pytest.fixture
def cluster(embedded_cluster: EmbeddedCluster) -> Iterator[EmbeddedCluster]:
    yield embedded_cluster
    embedded_cluster.cancel_all()


def site_file(c: EmbeddedCluster, tmp: Path) -> Path:
    data = yaml.safe_load(c.site_path.read_text())
    data["preflight"] = {"level": "quick", "state_dir": str(tmp / "state"),
                         "max_drain_fraction": 0.2, "disk_paths": [str(tmp)],
                         "thresholds": {"disk_free_gb_min": 0.1}}
    path = tmp / "site.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def submit(c: EmbeddedCluster, tmp: Path, name: str, env: dict[str, str] | None = None) -> Job:
    body = job_body(name, spares=1, env=env)
    body["policy"]["preflight_level"] = "quick"
    path = tmp / f"{name}.yaml"
    path.write_text(yaml.safe_dump(body))
    result = gantry(c, tmp, "submit", str(path), "--site", str(site_file(c, tmp)), "--json")
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    return Job(c, tmp, data["job_id"], Path(data["job_dir"]), name)


def gate_record(job: Job) -> dict[str, Any]:
    record: dict[str, Any] = json.loads(
        (job.job_dir / "runs" / f"{job.job_id}-0" / "gate.json").read_text())
    return record


def gate_log(job: Job) -> str:
    """The job's standard error: where the gate prints its table and decision."""
    return (job.job_dir / "logs" / f"slurm-{job.job_id}.err").read_text()


def drain_reasons(c: EmbeddedCluster) -> dict[str, str]:
    shown = c.run("sinfo", "-h", "-R", "-N", "-o", "%N|%E").stdout
    return {node: reason for line in shown.splitlines() if "|" in line
            for node, reason in [line.split("|", 1)]}


def test_healthy_allocation_passes_the_fabric_test_and_trains(
        cluster: EmbeddedCluster, tmp_path: Path) -> None:
    job = submit(cluster, tmp_path, "fabric-healthy")
    info = job.wait_done()
    log = job.log()
    assert info["state"] == "COMPLETED", log
    fabric = gate_record(job)["fabric"]
    assert fabric["status"] == "PASS", fabric
    assert len(fabric["nodes"]) == 3 and fabric["culprits"] == {}
    assert "fabric test on 3 nodes: n1,n2,n3" in log
    assert "fabric PASS on 3 nodes" in gate_log(job)
    assert [r["step"] for r in job.metrics()] == list(range(1, STEPS + 1))
    assert job.status()["fabric"].startswith("PASS")


def test_slow_node_is_named_drained_and_the_spare_trains(
        cluster: EmbeddedCluster, tmp_path: Path) -> None:
    others = "n[4-8]"  # leaves the job exactly n[1-3]: 2 rank nodes + 1 spare
    cluster.run("scontrol", "update", f"NodeName={others}", "State=DRAIN",
                f"Reason={OPERATOR_REASON}")
    try:
        job = submit(cluster, tmp_path, "fabric-slow",
                     env={"GANTRY_FAULT_SLOW_FABRIC": f"{SLOW}:0.15"})
        info = job.wait_done()
        log = job.log()
        assert info["state"] == "COMPLETED", log
        record = gate_record(job)
        fabric = record["fabric"]
        assert fabric["status"] == "FAIL" and fabric["slow_nodes"] == [SLOW], fabric
        assert list(fabric["culprits"]) == [SLOW]
        assert record["excluded"] == [SLOW] and record["drained"] == [SLOW]
        assert record["verdicts"][SLOW]["failing"] == ["fabric.node"]
        ran = job.launch_nodes(0)
        assert sorted(ran) == ["n1", "n3"], log
        assert [r["step"] for r in job.metrics()] == list(range(1, STEPS + 1))
        reasons = drain_reasons(cluster)
        assert reasons[SLOW].startswith("gantry:fabric.node:links-"), reasons
        for node in ("n4", "n5", "n6", "n7", "n8"):
            assert reasons[node] == OPERATOR_REASON
        assert f"; fabric FAIL: slow node {SLOW}" in gate_log(job)
        assert job.status()["fabric"].startswith(f"FAIL: slow node {SLOW}")
    finally:
        cluster.cancel_all()
        for node in (SLOW, others):
            cluster.run("scontrol", "update", f"NodeName={node}", "State=RESUME", check=False)
