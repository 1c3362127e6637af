"""gantry's job commands on the real embedded Slurm: status and cancel of several jobs and
with --state / --name filters, a job Slurm forgot shown GONE (stale), the expanded log paths,
`submit --dry-run --json`, `cluster up --json`.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from tests.embedded_cluster import EmbeddedCluster


def gantry(cluster: EmbeddedCluster, cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**cluster.env, "GANTRY_JOBS_DIR": str(cwd / "jobs")}
    return subprocess.run([sys.executable, "-m", "launcher", *args], capture_output=True,
                          text=True, cwd=cwd, env=env, timeout=120, check=False)


def held_job(cluster: EmbeddedCluster, cwd: Path, name: str) -> dict[str, Any]:
    """A gantry job kept PENDING: it depends on a held plain Slurm job."""
    blocker = cluster.sbatch("--hold", "-N1", "--wrap=true")
    job = cwd / f"{name}.yaml"
    job.write_text(f"name: {name}\nmodel: {{n_layer: 2, n_head: 2, n_embd: 8}}\n"
                   "parallelism: {pp: 1, dp: 1}\npolicy: {preflight_level: 'off'}\n"
                   "resources: {nodes: 1, time_limit: '5'}\n")
    result = gantry(cluster, cwd, "submit", str(job), "--site", str(cluster.site_path),
                    "--json", "--dependency", f"afterok:{blocker}")
    assert result.returncode == 0, result.stderr
    data: dict[str, Any] = json.loads(result.stdout)
    data["blocker"] = blocker
    return data


def gantry_json(cluster: EmbeddedCluster, cwd: Path, *args: str) -> Any:
    result = gantry(cluster, cwd, *args, "--json")
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def test_status_and_cancel_take_several_jobs_and_filters(embedded_cluster: EmbeddedCluster,
                                                         tmp_path: Path) -> None:
    cluster = embedded_cluster
    jobs = [held_job(cluster, tmp_path, name) for name in ("alpha-1", "alpha-2", "beta-1")]
    ids = [job["job_id"] for job in jobs]
    try:
        rows = gantry_json(cluster, tmp_path, "status", ids[0], ids[2])
        assert [row["job_id"] for row in rows] == [ids[0], ids[2]]
        for row, job in zip(rows, (jobs[0], jobs[2]), strict=True):
            assert row["state"] == "PENDING" and row["stale"] is False
            assert row["logs"] == {  # %j expanded
                "out": f"{job['job_dir']}/logs/slurm-{job['job_id']}.out",
                "err": f"{job['job_dir']}/logs/slurm-{job['job_id']}.err"}
        named = gantry_json(cluster, tmp_path, "status", "--name", "alpha-*")
        assert [row["job_id"] for row in named] == ids[:2]
        assert gantry_json(cluster, tmp_path, "status", "--state", "running") == []
        assert len(gantry_json(cluster, tmp_path, "status", "--state", "PENDING,RUNNING")) == 3
        done = gantry_json(cluster, tmp_path, "cancel", "--name", "beta-*", "--state", "PENDING")
        assert [(d["job_id"], d["action"]) for d in done] == [(ids[2], "cancel")]
        cluster.wait_job(ids[2], ("CANCELLED",))
        assert cluster.job(ids[0]).state == "PENDING"
        done = gantry_json(cluster, tmp_path, "cancel", ids[0], ids[1])
        assert [d["job_id"] for d in done] == ids[:2]
        for job_id in ids[:2]:
            cluster.wait_job(job_id, ("CANCELLED",))
    finally:
        cluster.scancel(*ids, *(job["blocker"] for job in jobs))
    refused = gantry(cluster, tmp_path, "cancel")
    assert refused.returncode == 2 and refused.stderr.startswith("error: cancel: no job given")


def test_a_job_slurm_forgot_is_gone_not_running(embedded_cluster: EmbeddedCluster,
                                                tmp_path: Path) -> None:
    """A job directory whose last record says RUNNING but whose id Slurm does not know (as
    after MinJobAge, or a cluster whose state was lost) is GONE and stale, not RUNNING."""
    job = held_job(embedded_cluster, tmp_path, "forgotten")
    embedded_cluster.scancel(job["job_id"], job["blocker"])
    meta = Path(job["job_dir"]) / "meta.json"
    data = json.loads(meta.read_text())
    data["job_id"] = str(int(job["job_id"]) + 1_000_000)  # an id Slurm never issued
    data["last_state"] = {"state": "RUNNING", "terminal": False, "nodes": "n1"}
    meta.write_text(json.dumps(data))
    row = gantry_json(embedded_cluster, tmp_path, "status", job["job_dir"])
    assert (row["state"], row["stale"], row["last_seen_state"]) == ("GONE", True, "RUNNING")
    table = gantry(embedded_cluster, tmp_path, "status")
    assert "GONE (was RUNNING)" in table.stdout and " RUNNING " not in table.stdout
    data["last_state"] = {"state": "COMPLETED", "terminal": True}
    meta.write_text(json.dumps(data))
    row = gantry_json(embedded_cluster, tmp_path, "status", job["job_dir"])
    assert (row["state"], row["stale"]) == ("COMPLETED", False)


def test_status_records_a_state_once_and_its_change(embedded_cluster: EmbeddedCluster,
                                                    tmp_path: Path) -> None:
    """Asking twice leaves meta.json as the first answer recorded it (no rewrite per call);
    a new state (the job cancelled) is recorded, with when gantry first saw it."""
    job = held_job(embedded_cluster, tmp_path, "asked")
    meta = Path(job["job_dir"]) / "meta.json"
    try:
        gantry_json(embedded_cluster, tmp_path, "status", job["job_id"])
        first = meta.read_text()
        first_inode = meta.stat().st_ino
        assert json.loads(first)["last_state"]["state"] == "PENDING"
        gantry_json(embedded_cluster, tmp_path, "status", job["job_id"])
        assert (meta.read_text(), meta.stat().st_ino) == (first, first_inode)
    finally:
        embedded_cluster.scancel(job["job_id"], job["blocker"])
    row = gantry_json(embedded_cluster, tmp_path, "status", job["job_id"])
    recorded = json.loads(meta.read_text())
    assert row["state"] == recorded["last_state"]["state"] == "CANCELLED"
    assert recorded["last_state_at"] >= json.loads(first)["last_state_at"]


def test_submit_dry_run_json_prints_json(embedded_cluster: EmbeddedCluster,
                                         tmp_path: Path) -> None:
    job = tmp_path / "dry.yaml"
    job.write_text("name: dry\nmodel: {n_layer: 2, n_head: 2, n_embd: 8}\n"
                   "parallelism: {pp: 1, dp: 1}\nresources: {nodes: 1}\n")
    data = gantry_json(embedded_cluster, tmp_path, "submit", str(job), "--site",
                       str(embedded_cluster.site_path), "--dry-run")
    assert data["dry_run"] is True and data["script"].startswith("#!/bin/bash\n")
    assert "--nodes=1" in data["sbatch_options"] and "--job-name=dry" in data["sbatch_options"]
    assert not (tmp_path / "jobs").exists()
    verdict = gantry_json(embedded_cluster, tmp_path, "submit", str(job), "--site",
                          str(embedded_cluster.site_path), "--test-only")
    assert verdict["test_only"] is True and "to start at" in verdict["verdict"]


def test_cluster_up_json_of_a_running_cluster(embedded_cluster: EmbeddedCluster,
                                              tmp_path: Path) -> None:
    data = gantry_json(embedded_cluster, tmp_path, "cluster", "up", "--site",
                       str(embedded_cluster.site_path))
    assert data["already_running"] is True and data["nodes"] == embedded_cluster.nodes
    assert data["slurm_conf"] == str(embedded_cluster.slurm_conf)
    version = embedded_cluster.run("sinfo", "-V").stdout.split()[-1]  # "22.05.8"
    assert data["slurm_version"] == version
