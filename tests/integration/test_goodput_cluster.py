"""Goodput of a real job with a fault and a recovery on the embedded cluster.

The resilience tests' tiny pp=2 job (tests/integration/resilience_helpers.py) runs with a
spare; rank 1 is SIGKILLed at step 4 (GANTRY_FAULT_KILL), `gantry recover` puts the spare in
its place and the step is relaunched inside the allocation. Then `gantry status --json`,
`gantry report --json` and the Prometheus textfile of `gantry metrics` (read with
prometheus-client's parser) must show the same breakdown, with recovery, recomputed steps,
checkpoint waits and training in it, adding up to the wall time exactly.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.embedded_cluster import EmbeddedCluster
from tests.integration.resilience_helpers import STEPS, gantry, job_body, submit

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def cluster(embedded_cluster: EmbeddedCluster,
            tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedCluster]:
    built = gantry(embedded_cluster, tmp_path_factory.mktemp("build"), "build", "--site",
                   str(embedded_cluster.site_path), timeout=600)
    assert built.returncode == 0, built.stderr
    yield embedded_cluster
    embedded_cluster.cancel_all()
    shown = embedded_cluster.run("sinfo", "-h", "-R", "-N", "-o", "%N|%E").stdout
    for line in shown.splitlines():  # resume only what the recovery drained
        node, _, reason = line.partition("|")
        if reason.startswith("gantry:run:"):
            embedded_cluster.run("scontrol", "update", f"NodeName={node}", "State=RESUME")


def test_a_recovered_job_accounts_for_its_wall_time(cluster: EmbeddedCluster,
                                                    tmp_path: Path) -> None:
    job = submit(cluster, tmp_path, job_body("goodput", spares=1,
                                             env={"GANTRY_FAULT_KILL": "4:1"}))
    info = job.wait_done()
    log = job.log()
    assert (info["state"], info["restarts"]) == ("COMPLETED", 0), log
    status = job.status()["goodput"]
    parts = status["parts_us"]
    assert status["ended"] and status["wall_us"] == sum(parts.values()), status
    assert [a["attempt"] for a in status["attempts"]] == [f"{job.job_id}-0",
                                                          f"{job.job_id}-0.1"], status
    assert status["failures"] == 1 and status["recomputed_steps"] >= 1, (status, log)
    for part in ("queue", "startup", "training", "checkpoint", "recomputed", "recovery"):
        assert parts[part] > 0, (part, status, log)
    assert parts["preflight_gate"] > 0, status  # preflight off: the script's set-up
    assert not [s for s in status["sources"] if not s.startswith("end: Slurm")], status
    assert 0 < status["ettr"] < 1
    # every step of the trajectory counted once as training: the relaunch resumed from a
    # checkpoint at step 2 or later and ran the steps after it again
    assert status["checkpoints"] >= STEPS // 2

    text = gantry(cluster, tmp_path, "status", job.job_id).stdout
    assert f"goodput    {status['lines'][0]}" in text, text
    assert f"goodput    {job.job_id}-0.1: " in text, text

    report = gantry(cluster, tmp_path, "report", job.job_id, "--json",
                    "--out", str(tmp_path / "report"))
    assert report.returncode == 0, report.stderr
    result = json.loads(report.stdout)
    assert result["goodput"]["parts_us"] == parts, (result["goodput"], status)
    assert result["checkpoint_interval"]["mtbf_s"] > 0, result["checkpoint_interval"]
    assert result["checkpoint_interval"]["interval_steps"] >= 1
    assert result["mfu"] is None  # a CPU site
    assert "<h2>Goodput</h2>" in (tmp_path / "report" / "report.html").read_text()

    out = tmp_path / "textfiles"
    out.mkdir()
    written = gantry(cluster, tmp_path, "metrics", job.job_id, "--textfile-dir", str(out),
                     "--json")
    assert written.returncode == 0, written.stderr
    metrics = json.loads(written.stdout)
    lead = out / f"gantry_{job.job_id}_{metrics['lead_node']}.prom"
    assert sorted(p.name for p in out.iterdir()) == sorted(
        f"gantry_{job.job_id}_{node}.prom" for node in metrics["nodes"])
    families = {f.name: f for f in text_string_to_metric_families(lead.read_text())}
    shown = {s.labels["part"]: s.value for s in families["gantry_goodput_seconds"].samples}
    assert shown == {name: us / 1e6 for name, us in parts.items()}
    wall = families["gantry_wall_seconds"].samples[0].value
    assert wall == status["wall_us"] / 1e6
    assert math.isclose(sum(shown.values()), wall, abs_tol=1e-6)
    assert families["gantry_ettr_ratio"].samples[0].value == status["ettr"]
    assert families["gantry_failed_steps"].samples[0].value == 1.0
    assert families["gantry_step"].samples[0].value == float(STEPS)
    timers = families["gantry_rank_timer_seconds"].samples
    assert {s.labels["rank"] for s in timers} == {"0"}  # one rank per node: rank 0 here
