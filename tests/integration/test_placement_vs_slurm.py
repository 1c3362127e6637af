"""gantry's placement against Slurm's own topology/tree allocation on the embedded cluster.

For several cluster states (nodes held busy by exclusive jobs, a node half used, a node drained
by gantry) and requests Slurm can satisfy now, on the real embedded cluster (8 nodes, leaf
switches of 2 nodes under 2 spines under a core):

- gantry's plan, read from the live cluster (`gantry plan job.yaml --json`), spans no more
  leaf switches than the nodes Slurm itself allocates for the same request in the same state
  (`sbatch -N M --ntasks-per-node=1`, no nodelist, then read where Slurm put it);
- `gantry submit` of that job computes the same plan from the live state, and Slurm gives the
  job exactly the planned nodes (rank nodes and spares): pinned with --nodelist when the job
  is not requeued, held to the planned domain switch (the rest excluded) when it is (a
  requeued job keeps its required nodes, so a pinned job could never run after a node loss);
- nodes gantry drained are never planned and are excluded (--exclude).
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from launcher.placement_record import read_placement_record
from launcher.site_config import load_site
from launcher.site_topology import site_topology
from tests.embedded_cluster import EmbeddedCluster
from topology import hostlists

GANTRY_DRAIN_REASON = "gantry:test:held-out-by-placement-test"
#: A job that holds its nodes until cancelled (output discarded, not left in the cwd).
HOLD = ("--output=/dev/null", "--wrap=sleep 600")

# name -> (exclusive holds, one-CPU holds, drained by gantry)
STATES: dict[str, tuple[list[str], list[str], list[str]]] = {
    "idle": ([], [], []),
    "one-per-leaf-busy": (["n1", "n3", "n5"], [], []),
    "leaf1-full-leaf3-half": (["n1", "n2", "n5"], [], []),
    "mixed-and-drained": (["n8"], ["n4"], ["n6"]),
}
# (nodes, spares, pp, dp): all 1 rank per node on this CPU site
REQUESTS = [(2, 0, 2, 1), (2, 1, 2, 1), (4, 0, 2, 2), (4, 1, 2, 2)]


def gantry(cluster: EmbeddedCluster, cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**cluster.env, "GANTRY_JOBS_DIR": str(cwd / "jobs")}
    return subprocess.run([sys.executable, "-m", "launcher", *args], capture_output=True,
                          text=True, cwd=cwd, env=env, timeout=120, check=False)


def leaves_of(cluster: EmbeddedCluster, nodes: list[str]) -> set[str]:
    topology = site_topology(load_site(cluster.site_path))
    return {topology.switch_names[int(topology.node_leaf[topology.node_ids[n]])]
            for n in nodes}


def node_states(cluster: EmbeddedCluster) -> dict[str, str]:
    out = cluster.run("sinfo", "-h", "-N", "-o", "%N %T").stdout
    return dict(line.split() for line in out.splitlines() if line.strip())


def wait_nodes(cluster: EmbeddedCluster, wanted: dict[str, str], timeout: float = 60) -> None:
    """Until each node in ``wanted`` shows that sinfo state."""
    deadline = time.monotonic() + timeout
    while True:
        states = node_states(cluster)
        if all(states.get(n) == s for n, s in wanted.items()):
            return
        assert time.monotonic() < deadline, f"nodes {states} not {wanted}"
        time.sleep(0.3)


def allocated_nodes(cluster: EmbeddedCluster, job_id: str) -> list[str]:
    info = cluster.wait_job(job_id, states=("RUNNING",), timeout=60)
    return hostlists.expand(info.nodes)


def release(cluster: EmbeddedCluster, job_id: str, nodes: list[str],
            idle: dict[str, str]) -> None:
    """Cancel a probe job and wait until its nodes are back in their state before it."""
    cluster.scancel(job_id)
    cluster.wait_job(job_id, states=("CANCELLED",), timeout=60)
    wait_nodes(cluster, {n: idle[n] for n in nodes})


@pytest.fixture
def cluster(embedded_cluster: EmbeddedCluster) -> Iterator[EmbeddedCluster]:
    yield embedded_cluster
    embedded_cluster.cancel_all()
    drained = [n for n, s in node_states(embedded_cluster).items() if s.startswith("drain")]
    if drained:
        embedded_cluster.run("scontrol", "update", f"NodeName={','.join(drained)}",
                             "State=RESUME")


def set_state(cluster: EmbeddedCluster, name: str) -> dict[str, str]:
    """Hold, half-use and drain nodes as state ``name`` says; return every node's state."""
    exclusive, partial, drained = STATES[name]
    wanted: dict[str, str] = {}
    for node in exclusive:
        cluster.sbatch("--exclusive", "-N1", f"--nodelist={node}", *HOLD)
        wanted[node] = "allocated"
    for node in partial:
        cluster.sbatch("-N1", "-n1", "--cpus-per-task=1", f"--nodelist={node}",
                       *HOLD)
        wanted[node] = "mixed"
    for node in drained:
        cluster.run("scontrol", "update", f"NodeName={node}", "State=DRAIN",
                    f"Reason={GANTRY_DRAIN_REASON}")
        wanted[node] = "drained"
    wait_nodes(cluster, wanted)
    return node_states(cluster)


def job_file(directory: Path, nodes: int, spares: int, pp: int, dp: int,
             requeue: bool = True) -> Path:
    path = directory / f"place-{nodes}-{spares}-{pp}x{dp}-{requeue}.yaml"
    path.write_text(yaml.safe_dump({
        "name": f"place-{nodes}-{spares}",
        "model": {"n_layer": 4, "n_head": 2, "n_embd": 8},
        "parallelism": {"pp": pp, "dp": dp},
        "resources": {"nodes": nodes, "spares": spares, "time_limit": "00:05:00"},
        "policy": {"preflight_level": "off", "requeue": requeue},
    }))
    return path


def plan(cluster: EmbeddedCluster, tmp_path: Path, job: Path) -> dict[str, Any]:
    result = gantry(cluster, tmp_path, "plan", str(job), "--site", str(cluster.site_path),
                    "--json")
    assert result.returncode == 0, result.stderr
    data: dict[str, Any] = json.loads(result.stdout)
    return data


@pytest.mark.parametrize("state_name", sorted(STATES))
def test_placement_spans_no_more_switches_than_slurm(cluster: EmbeddedCluster, tmp_path: Path,
                                                    state_name: str) -> None:
    before = set_state(cluster, state_name)
    _exclusive, _partial, drained = STATES[state_name]
    free = [n for n, s in before.items() if s in ("idle", "mixed")]
    for index, (nodes, spares, pp, dp) in enumerate(REQUESTS):
        total = nodes + spares
        if total > len(free):
            continue
        requeue = index % 2 == 1  # both ways of holding Slurm to the plan, in every state
        job = job_file(tmp_path, nodes, spares, pp, dp, requeue)
        planned = plan(cluster, tmp_path, job)
        assert planned["cluster_state"]["source"].startswith("SLURM_CONF=")
        chosen = [role["node"] for role in planned["roles"]]
        assert len(chosen) == total and set(chosen) <= set(free), (chosen, free)
        assert not set(chosen) & set(drained)
        assert len(planned["spanned"]) == len(leaves_of(cluster, chosen))

        # Slurm's own choice for the same request, in the same state.
        probe = cluster.sbatch(f"--nodes={total}", "--ntasks-per-node=1", *HOLD)
        slurm_nodes = allocated_nodes(cluster, probe)
        release(cluster, probe, slurm_nodes, before)
        slurm_span = len(leaves_of(cluster, slurm_nodes))
        print(f"{state_name:<22} {nodes}+{spares} pp{pp}xdp{dp}: gantry "
              f"{hostlists.collect(chosen):<12} {len(planned['spanned'])} leaves | Slurm "
              f"{hostlists.collect(slurm_nodes):<12} {slurm_span} leaves")
        assert len(planned["spanned"]) <= slurm_span, (
            f"{state_name} {nodes}+{spares}: gantry {chosen} spans {planned['spanned']}, "
            f"Slurm {slurm_nodes} spans {slurm_span}")

        # gantry submit plans the same from the live state and gets exactly those nodes.
        result = gantry(cluster, tmp_path, "submit", str(job), "--site",
                        str(cluster.site_path), "--json", "--", "sleep", "600")
        assert result.returncode == 0, result.stderr
        submitted = json.loads(result.stdout)
        placement = json.loads((Path(submitted["job_dir"]) / "placement.json").read_text())
        assert placement["mode"] == "planned"
        assert placement["pin"] == ("domain" if requeue else "exact")
        record = read_placement_record(Path(submitted["job_dir"]) / "placement.json")
        assert [*record.rank_nodes, *record.spare_nodes] == chosen
        options = placement["sbatch_options"]
        assert f"--switches={len(planned['spanned'])}@10:00" in options
        script = (Path(submitted["job_dir"]) / "job.sbatch").read_text()
        for option in options:
            assert f"#SBATCH {option}\n" in script
        excluded = set(hostlists.expand(next(
            (o.split("=", 1)[1] for o in options if o.startswith("--exclude=")), "")))
        assert set(drained) <= excluded and not excluded & set(chosen)
        if requeue:
            assert not any(o.startswith("--nodelist=") for o in options)
        else:
            assert f"--nodelist={hostlists.collect(chosen)}" in options
        got = allocated_nodes(cluster, submitted["job_id"])
        assert sorted(got) == sorted(chosen), (state_name, nodes, spares, got, chosen)
        release(cluster, submitted["job_id"], got, before)


def test_busy_cluster_leaves_the_choice_to_slurm(cluster: EmbeddedCluster,
                                                 tmp_path: Path) -> None:
    """Fewer free nodes than the job needs: no nodelist; Slurm waits for nodes, within the
    leaf switches an idle cluster needs, and never uses the node gantry drained."""
    before = set_state(cluster, "mixed-and-drained")
    for node in ("n1", "n2", "n3", "n5"):
        cluster.sbatch("--exclusive", "-N1", f"--nodelist={node}", *HOLD)
    wait_nodes(cluster, {n: "allocated" for n in ("n1", "n2", "n3", "n5")})
    assert before["n6"] == "drained"
    job = job_file(tmp_path, 4, 0, 2, 2)
    result = gantry(cluster, tmp_path, "submit", str(job), "--site", str(cluster.site_path),
                    "--json", "--", "sleep", "600")
    assert result.returncode == 0, result.stderr
    assert "note: placement:" in result.stderr
    submitted = json.loads(result.stdout)
    placement = json.loads((Path(submitted["job_dir"]) / "placement.json").read_text())
    assert placement["mode"] == "slurm"
    assert read_placement_record(Path(submitted["job_dir"]) / "placement.json").roles == ()
    assert placement["sbatch_options"] == ["--switches=2@10:00", "--exclude=n6"]
    script = (Path(submitted["job_dir"]) / "job.sbatch").read_text()
    assert "#SBATCH --exclude=n6\n" in script and "--nodelist=" not in script.split("set -u")[0]
    info = cluster.job(submitted["job_id"])
    assert info.state == "PENDING", info


def test_render_reads_the_site_cluster_without_slurm_conf(cluster: EmbeddedCluster,
                                                          tmp_path: Path) -> None:
    """An embedded site's own slurm.conf is used when SLURM_CONF is unset."""
    set_state(cluster, "one-per-leaf-busy")  # n1, n3, n5 busy: n7+n8 share a leaf
    job = job_file(tmp_path, 2, 0, 2, 1)
    env = {k: v for k, v in cluster.env.items() if k != "SLURM_CONF"}
    env["GANTRY_JOBS_DIR"] = str(tmp_path / "jobs")
    result = subprocess.run([sys.executable, "-m", "launcher", "render", str(job), "--site",
                             str(cluster.site_path)], capture_output=True, text=True,
                            cwd=tmp_path, env=env, timeout=120, check=False)
    assert result.returncode == 0, result.stderr
    # requeueable: held to leaf4 (everything else excluded), Slurm's best fit is n7+n8
    assert "#SBATCH --switches=1@10:00\n#SBATCH --exclude=n[1-6]\n" in result.stdout
    assert "launch_nodes=n7,n8\n" in result.stdout  # preflight off: the planned nodes train
    assert result.stderr == ""
