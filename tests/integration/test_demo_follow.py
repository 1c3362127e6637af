"""`gantry submit --follow` on the real embedded cluster: a pp 2 x dp 2 job on 4 nodes + 1
spare, with one allocated node's InfiniBand port down (fake sysfs through GANTRY_SYSFS_ROOT).
The live view shows the preflight table (the node FAILs net.ib_ports and is drained with
gantry's reason), the steps, and a summary that names the drained node, the nodes used and
the phase times; the JSON summary carries the same."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from launcher.demo.faults import write_fake_sysfs
from tests.embedded_cluster import EmbeddedCluster

pytestmark = pytest.mark.slow
FAULTY = "n2"


def demo_site(c: EmbeddedCluster, tmp: Path) -> Path:
    """The cluster's site with a private preflight state dir (drain history, rate limit)."""
    data = yaml.safe_load(c.site_path.read_text())
    data["preflight"] = {"level": "quick", "state_dir": str(tmp / "state"),
                         "max_drain_fraction": 0.5, "disk_paths": [str(tmp)],
                         "thresholds": {"disk_free_gb_min": 0.1}}
    path = tmp / "site.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def job_yaml(tmp: Path, sysfs: Path) -> Path:
    body: dict[str, Any] = {
        "name": "follow",
        "model": {"n_layer": 4, "n_head": 2, "n_embd": 32, "vocab_size": 64, "seq_len": 16},
        "parallelism": {"pp": 2, "dp": 2, "schedule": "1f1b", "micro_batches": 4,
                        "micro_batch_size": 2},
        "train": {"steps": 8, "lr": 3e-3, "seed": 3},
        "resources": {"nodes": 4, "spares": 1, "time_limit": "00:03:00"},
        "policy": {"preflight_level": "quick", "requeue": False, "signal_lead_s": 30},
        "env": {"GANTRY_SYSFS_ROOT": str(sysfs), "OMP_NUM_THREADS": "1"},
    }
    path = tmp / "follow.yaml"
    path.write_text(yaml.safe_dump(body))
    return path


def gantry(c: EmbeddedCluster, cwd: Path, *args: str,
           timeout: float = 300) -> subprocess.CompletedProcess[str]:
    env = {**c.env, "GANTRY_JOBS_DIR": str(cwd / "jobs")}
    return subprocess.run([sys.executable, "-m", "launcher", *args], capture_output=True,
                          text=True, cwd=cwd, env=env, timeout=timeout, check=False)


def test_follow_shows_gate_excluding_faulty_node_steps_and_summary(
        embedded_cluster: EmbeddedCluster, tmp_path: Path) -> None:
    c = embedded_cluster
    c.cancel_all()
    c.wait_all_idle()  # FAULTY must be free to be planned (the previous test may still hold it)
    site = demo_site(c, tmp_path)
    built = gantry(c, tmp_path, "build", "--site", str(site))
    assert built.returncode == 0, built.stderr
    job = job_yaml(tmp_path, write_fake_sysfs(tmp_path / "sysfs", [FAULTY]))
    try:
        result = gantry(c, tmp_path, "submit", str(job), "--site", str(site), "--follow",
                        "--json")
        view = result.stderr
        assert result.returncode == 0, view[-4000:]
        summary = json.loads(result.stdout)["summary"]
        assert summary["state"] == "COMPLETED"
        assert summary["steps"] == 8, view
        assert [e["node"] for e in summary["excluded"]] == [FAULTY], summary
        excluded = summary["excluded"][0]
        assert excluded["status"] == "FAIL"
        assert excluded["outcome"] == "excluded, drained: gantry:net.ib_ports:mlx5_0-1-down"
        assert "mlx5_0/1: DOWN/Polling" in excluded["finding"]
        assert len(summary["nodes_used"]) == 4 and FAULTY not in summary["nodes_used"]
        assert {"preflight", "gate", "training"} <= set(summary["phases_s"])
        # The view (plain: stderr is not a terminal): table row, steps, summary.
        row = next(line for line in view.splitlines() if line.lstrip().startswith(FAULTY)
                   and "FAIL" in line)
        assert "net.ib_ports" in row and "drained" in row
        assert "step 8/8" in view and "summary:" in view
        assert f"{FAULTY} excluded, drained: gantry:net.ib_ports" in view
        assert "nodes used: " in view and "time: " in view
        assert not any(" loss " in line and " norm " in line  # labelled or not
                       for line in view.splitlines())  # the trainer's own lines are hidden
    finally:
        c.cancel_all()
        c.run("scontrol", "update", f"NodeName={FAULTY}", "State=RESUME", check=False)


def test_follow_cancels_a_job_past_its_timeout(embedded_cluster: EmbeddedCluster,
                                               tmp_path: Path) -> None:
    from rich.console import Console

    from launcher.job_dir import JobDir
    from launcher.live.follow import follow_job
    from launcher.slurm import CommandRunner, make_client

    c = embedded_cluster
    job = tmp_path / "sleepy.yaml"
    job.write_text("name: sleepy\nresources: {nodes: 1, time_limit: '00:05:00'}\n"
                   "policy: {preflight_level: 'off'}\n")
    try:
        submitted = gantry(c, tmp_path, "submit", str(job), "--site", str(c.site_path),
                           "--json", "--", "sleep", "300")
        assert submitted.returncode == 0, submitted.stderr
        record = json.loads(submitted.stdout)
        console = Console(record=True, width=120, color_system=None)
        client = make_client("cli", runner=CommandRunner(env=c.env))
        info, summary = follow_job(JobDir(Path(record["job_dir"])), str(record["job_id"]),
                                   client, console, poll_s=0.2, timeout_s=3.0)
        assert info is not None and info.state == "CANCELLED", info
        assert summary.state == "CANCELLED"
        text = console.export_text()
        assert f"job {record['job_id']} still running after 3 s: cancelling it" in text
        assert f"job {record['job_id']} CANCELLED" in text
    finally:
        c.cancel_all()
