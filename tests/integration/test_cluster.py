"""The embedded cluster against real slurmctld/slurmd/munged and real MPI ranks.

Uses the session's ``embedded_cluster`` (8 nodes, leaf switches of 2) and, for `down`,
private clusters that the test may stop.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time

import pytest
import yaml

from launcher.cluster.ports import port_is_free
from tests.embedded_cluster import (
    ClusterStartError,
    EmbeddedCluster,
    cluster_processes,
    run_gantry,
    start_embedded_cluster,
)

LEAVES = [{"n1", "n2"}, {"n3", "n4"}, {"n5", "n6"}, {"n7", "n8"}]


def _pids(cluster: EmbeddedCluster) -> dict[str, int]:
    status = run_gantry("cluster", "status", "--site", str(cluster.site_path), "--json")
    assert status.returncode == 0, status.stderr
    return {d["name"]: d["pid"] for d in json.loads(status.stdout)["daemons"]}


def test_comes_up_with_all_nodes_idle(embedded_cluster: EmbeddedCluster) -> None:
    c = embedded_cluster
    status = c.gantry("cluster", "status", "--site", str(c.site_path), "--json")
    assert status.returncode == 0, status.stderr
    data = json.loads(status.stdout)
    assert data["running"] is True
    assert data["slurm_conf"] == str(c.slurm_conf)
    assert [n["name"] for n in data["nodes"]] == [f"n{i}" for i in range(1, 9)]
    assert {n["state"] for n in data["nodes"]} == {"idle"}
    assert [root["name"] for root in data["topology"]] == ["core"]
    sinfo = c.run("sinfo", "-h", "-N", "-o", "%N %T").stdout.split("\n")
    assert sorted(line for line in sinfo if line) == sorted(f"n{i} idle" for i in range(1, 9))


def test_status_names_node_states_as_sinfo_does(embedded_cluster: EmbeddedCluster) -> None:
    """`gantry cluster status` reads nodes from Slurm's JSON (the one node parser) and names
    their states in sinfo's words: an idle drained node, a busy draining one, the rest."""
    c = embedded_cluster
    job = c.sbatch("-N1", "-w", "n7", "--wrap=sleep 300")
    try:
        c.wait_job(job, states=("RUNNING",), timeout=30)
        for node in ("n7", "n8"):
            c.run("scontrol", "update", f"NodeName={node}", "State=DRAIN", "Reason=test")
        status = c.gantry("cluster", "status", "--site", str(c.site_path), "--json")
        assert status.returncode == 0, status.stderr
        ours = {n["name"]: n["state"] for n in json.loads(status.stdout)["nodes"]}
        sinfo = c.run("sinfo", "-h", "-N", "-o", "%N %T").stdout.split()
        assert ours == dict(zip(sinfo[::2], sinfo[1::2], strict=True))
        assert (ours["n7"], ours["n8"], ours["n1"]) == ("draining", "drained", "idle")
    finally:
        c.scancel(job)
        for node in ("n7", "n8"):
            c.run("scontrol", "update", f"NodeName={node}", "State=RESUME")
        c.cancel_all()


def test_slurm_sees_the_switch_tree(embedded_cluster: EmbeddedCluster) -> None:
    topology = embedded_cluster.run("scontrol", "show", "topology").stdout
    assert "SwitchName=leaf1 Level=0" in topology
    assert "SwitchName=core Level=2" in topology


def test_status_plain_output_shows_tree(embedded_cluster: EmbeddedCluster) -> None:
    c = embedded_cluster
    c.wait_all_idle()  # a loaded machine can make a node miss a ping ("idle*") for a while
    result = c.gantry("cluster", "status", "--site", str(c.site_path))
    assert result.returncode == 0
    lines = result.stdout.splitlines()
    name = yaml.safe_load(c.site_path.read_text())["slurm"]["cluster_name"]
    assert lines[0].startswith(f"cluster {name}: up (Slurm ")
    assert lines[0].endswith("8 nodes: 8 idle")
    assert "      leaf1" in lines and "        n1 idle" in lines
    assert "\x1b[" not in result.stdout, "piped output must be plain"


def test_up_twice_is_a_noop(embedded_cluster: EmbeddedCluster) -> None:
    c = embedded_cluster
    before = _pids(c)
    again = c.gantry("cluster", "up", "--site", str(c.site_path))
    assert again.returncode == 0, again.stderr
    assert "already up" in again.stdout
    assert _pids(c) == before


def test_switches_constraint_pends_n4_and_runs_n2(embedded_cluster: EmbeddedCluster) -> None:
    c = embedded_cluster
    wide = c.sbatch("-N4", "--switches=1", "--wrap=sleep 1")
    try:
        narrow = c.sbatch("-N2", "--switches=1", "--wrap=srun hostname")
        done = c.wait_job(narrow, timeout=60)
        assert done.state == "COMPLETED"
        nodes = set(c.run("scontrol", "show", "hostnames", done.nodes).stdout.split())
        assert nodes in LEAVES, f"-N2 --switches=1 ran on {nodes}, not one leaf switch"
        # Still pending once the scheduler has looked at it again (no 4-node leaf).
        deadline = time.monotonic() + 20
        info = c.job(wide)
        while info.reason not in ("Resources", "Priority") and time.monotonic() < deadline:
            time.sleep(0.5)
            info = c.job(wide)
        assert info.state == "PENDING"
        assert info.reason in ("Resources", "Priority"), info.reason
    finally:
        c.scancel(wide)
        c.cancel_all()


def test_mpi4py_allreduce_across_two_nodes_via_pmix(embedded_cluster: EmbeddedCluster) -> None:
    c = embedded_cluster
    result = c.srun(
        "--mpi=pmix",
        "-N2",
        "--ntasks-per-node=1",
        sys.executable,
        "-m",
        "launcher.cluster.allreduce_check",
    )
    report = json.loads(result.stdout.strip().splitlines()[-1])
    assert report["ranks"] == 2
    assert report["sum"] == 3 == report["expected"]
    assert len(set(report["nodes"])) == 2, report


def test_sbatch_squeue_json_scontrol_salloc(embedded_cluster: EmbeddedCluster) -> None:
    c = embedded_cluster
    job = c.sbatch("-N1", "--job-name=gantry-probe", "--wrap=sleep 30")
    try:
        c.wait_job(job, states=("RUNNING",), timeout=30)
        queue = c.squeue_json()
        [entry] = [j for j in queue["jobs"] if str(j["job_id"]) == job]
        assert entry["name"] == "gantry-probe"
        assert c.job(job).state == "RUNNING"
        salloc = c.run("salloc", "-N1", "srun", "printenv", "SLURMD_NODENAME")
        assert salloc.stdout.strip() in c.nodes
    finally:
        c.cancel_all()


def test_cluster_env_drives_plain_slurm_tools(embedded_cluster: EmbeddedCluster) -> None:
    c = embedded_cluster
    env_text = c.gantry("cluster", "env", "--site", str(c.site_path)).stdout
    script = env_text + "\nsinfo -h -o '%D %t'\n"
    # A clean environment: only what `gantry cluster env` exports reaches sinfo.
    result = subprocess.run(
        ["bash", "-c", script],
        capture_output=True,
        text=True,
        env={"PATH": "/usr/bin:/bin"},
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["8", "idle"]


def test_down_stops_everything_it_started_even_with_a_running_job() -> None:
    flat = {
        "nodes": {"names": "d[1-2]", "cpus": 1, "real_memory_mb": 500},
        "topology": {"plugin": "flat"},
    }
    with start_embedded_cluster(overrides=flat) as c:
        run_dir = c.run_dir
        ports = _site_ports(c)
        # A daemon that died is noticed: `up` restarts the half-running cluster.
        os.kill(_pids(c)["slurmd-d2"], signal.SIGKILL)
        restarted = c.gantry("cluster", "up", "--site", str(c.site_path))
        assert restarted.returncode == 0, restarted.stderr
        assert "was partly up" in restarted.stdout
        assert "2 nodes idle" in restarted.stdout
        job = c.sbatch("-N2", "--wrap=srun sleep 300")
        c.wait_job(job, states=("RUNNING",), timeout=30)
        time.sleep(0.5)
        assert cluster_processes(run_dir), "expected running daemons before down"
        down = c.gantry("cluster", "down", "--site", str(c.site_path))
        assert down.returncode == 0, down.stderr
        assert "stopped 4 daemons" in down.stdout
        assert cluster_processes(run_dir) == []
        assert not list((run_dir / "pids").glob("*.pid"))
        assert all(port_is_free(p) for p in ports)
        again = c.gantry("cluster", "down", "--site", str(c.site_path))
        assert "was not running" in again.stdout
        # The run dir's logs survive `down` for post-mortems.
        assert (run_dir / "log" / "slurmctld.log").exists()


def test_failed_start_names_the_log_and_leaves_nothing_running() -> None:
    # More memory than this host has: slurmd registers, slurmctld marks the node invalid.
    impossible = {
        "nodes": {"names": "m1", "cpus": 1, "real_memory_mb": 900_000_000},
        "topology": {"plugin": "flat"},
    }
    with pytest.raises(ClusterStartError) as info, start_embedded_cluster(impossible):
        pass
    message = str(info.value)
    assert "node m1 is inval" in message or "node m1 is drain" in message, message
    assert "RealMemory" in message
    assert f"{info.value.run_dir}/log/slurmd-m1.log" in message
    assert cluster_processes(info.value.run_dir) == []
    assert not list((info.value.run_dir / "pids").glob("*.pid"))
    shutil.rmtree(info.value.run_dir.parent)


def _site_ports(c: EmbeddedCluster) -> list[int]:
    slurm = yaml.safe_load(c.site_path.read_text())["slurm"]
    base = slurm["slurmd_port_base"]
    return [slurm["controller_port"], *range(base, base + len(c.nodes))]


def test_up_with_a_changed_site_refuses_to_touch_the_running_cluster(
    embedded_cluster: EmbeddedCluster,
) -> None:
    c = embedded_cluster
    before = _pids(c)
    changed = yaml.safe_load(c.site_path.read_text())
    changed["nodes"]["cpus"] = 1
    other = c.site_path.with_name("changed-site.yaml")
    other.write_text(yaml.safe_dump(changed))
    try:
        result = c.gantry("cluster", "up", "--site", str(other))
    finally:
        other.unlink()
    assert result.returncode == 1
    assert "runs with a different slurm.conf" in result.stderr
    assert "gantry cluster down" in result.stderr
    assert _pids(c) == before
