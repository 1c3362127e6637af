"""`gantry site check` against the real embedded cluster: the session's site passes; sites
that disagree with the cluster (an extra node, GPUs Slurm does not have, another switch tree,
a missing partition, the plugin suite not loaded) fail with the check and the values named;
drained nodes warn, gantry's own drains told apart; an unreachable Slurm fails; a bad site
file is one line and exit status 2."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.embedded_cluster import REPO_ROOT, EmbeddedCluster


def site_check(cluster: EmbeddedCluster, site: Path,
               *extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "launcher", "site", "check", "--site",
                           str(site), *extra], capture_output=True, text=True, cwd=REPO_ROOT,
                          env=cluster.env, timeout=120, check=False)


def checks_of(result: subprocess.CompletedProcess[str]) -> dict[str, dict[str, Any]]:
    data = json.loads(result.stdout)
    return {c["id"]: c for c in data["checks"]}


def variant(cluster: EmbeddedCluster, tmp_path: Path, **sections: Any) -> Path:
    """The cluster's site file with whole sections replaced (same Slurm section)."""
    data = yaml.safe_load(cluster.site_path.read_text())
    for key, value in sections.items():
        data[key] = {**data.get(key, {}), **value} if isinstance(value, dict) else value
    path = tmp_path / "site.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def test_the_clusters_own_site_passes(embedded_cluster: EmbeddedCluster) -> None:
    result = site_check(embedded_cluster, embedded_cluster.site_path, "--json")
    assert result.returncode == 0, result.stdout + result.stderr
    checks = checks_of(result)
    for name in ("slurm", "partition", "nodes", "gpus", "cpus", "memory", "node-states",
                 "topology-plugin", "topology"):
        assert checks[name]["status"] == "PASS", checks[name]
    assert re.match(r"Slurm \d+\.\d+\.\d+, cluster gantry-test-", checks["slurm"]["observed"])
    assert checks["topology"]["observed"].startswith("7 switches")
    assert checks["plugins"]["status"] == "SKIP"
    assert checks["build"]["status"] in ("PASS", "WARN")
    plain = site_check(embedded_cluster, embedded_cluster.site_path)
    assert plain.returncode == 0
    # PASS, or WARN where this source tree has no cached build (the only check that may warn)
    verdict = "WARN" if checks["build"]["status"] == "WARN" else "PASS"
    assert plain.stdout.splitlines()[0] == f"site test: {verdict}"
    assert "  PASS topology: 7 switches" in plain.stdout


def test_a_site_that_disagrees_fails_naming_what(embedded_cluster: EmbeddedCluster,
                                                 tmp_path: Path) -> None:
    site = variant(embedded_cluster, tmp_path,
                   nodes={"names": "n[1-9]", "cpus": 4, "gpus_per_node": 4},
                   topology={"plugin": "tree", "switches": [
                       {"name": "a", "nodes": "n[1-3]"}, {"name": "b", "nodes": "n[4-9]"},
                       {"name": "top", "switches": "a,b"}]})
    result = site_check(embedded_cluster, site, "--json")
    assert result.returncode == 1, result.stdout + result.stderr
    checks = checks_of(result)
    assert checks["partition"]["status"] == "FAIL"
    assert "n9 not in it" in checks["partition"]["observed"]
    assert checks["nodes"]["status"] == "FAIL"
    assert checks["nodes"]["observed"].startswith("n9 unknown to Slurm")
    assert checks["gpus"]["status"] == "FAIL"
    assert checks["gpus"]["observed"] == "GPUs (Gres=) per node: n[1-8]: 0"
    assert "4 GPUs per node" in checks["gpus"]["expected"]
    assert checks["cpus"]["status"] == "WARN"
    assert checks["cpus"]["observed"] == "CPUs (CPUTot=) per node: n[1-8]: 2"
    assert checks["memory"]["status"] == "PASS"
    assert checks["topology"]["status"] == "FAIL"
    observed = checks["topology"]["observed"]
    assert "only in the site: a = n[1-3], b = n[4-9]" in observed
    assert "only in Slurm: leaf1 = n[1-2]" in observed
    plain = site_check(embedded_cluster, site)
    assert plain.returncode == 1
    assert plain.stdout.splitlines()[0] == "site test: FAIL"
    assert any(line.startswith("  FAIL gpus: ") and "-> set nodes.gpus_per_node" in line
               for line in plain.stdout.splitlines())


def test_a_missing_partition_and_a_topology_plugin_mismatch(
        embedded_cluster: EmbeddedCluster, tmp_path: Path) -> None:
    site = variant(embedded_cluster, tmp_path, slurm={"partition": "gpu"},
                   topology={"plugin": "flat", "switches": []})
    checks = checks_of(site_check(embedded_cluster, site, "--json"))
    assert checks["partition"]["status"] == "FAIL"
    assert checks["partition"]["observed"] == \
        f"no partition 'gpu' (Slurm has: {embedded_cluster.partition})"
    assert checks["topology-plugin"]["status"] == "FAIL"
    assert checks["topology-plugin"]["observed"] == "TopologyPlugin=topology/tree"
    assert checks["topology"]["status"] == "SKIP"


@pytest.fixture
def drained(embedded_cluster: EmbeddedCluster) -> Iterator[None]:
    embedded_cluster.run("scontrol", "update", "NodeName=n7", "State=DRAIN",
                         "Reason=gantry:gpu.ecc:test-site-check")
    embedded_cluster.run("scontrol", "update", "NodeName=n8", "State=DRAIN",
                         "Reason=cable swap")
    try:
        yield
    finally:
        embedded_cluster.run("scontrol", "update", "NodeName=n[7-8]", "State=RESUME")


def test_drained_nodes_warn_and_gantrys_drains_are_told_apart(
        embedded_cluster: EmbeddedCluster, drained: None) -> None:
    result = site_check(embedded_cluster, embedded_cluster.site_path, "--json")
    assert result.returncode == 0, result.stdout + result.stderr
    state = checks_of(result)["node-states"]
    assert state["status"] == "WARN"
    assert state["observed"].startswith("6 of 8 nodes schedulable; ")
    assert "n8: IDLE+DRAIN (cable swap)" in state["observed"]
    assert "n7 drained by gantry's preflight" in state["observed"]


def test_plugins_enabled_but_not_loaded_fail(embedded_cluster: EmbeddedCluster,
                                             tmp_path: Path) -> None:
    site = variant(embedded_cluster, tmp_path,
                   plugins={"enabled": True, "prefix": str(tmp_path / "suite")})
    check = checks_of(site_check(embedded_cluster, site, "--json"))["plugins"]
    assert check["status"] == "FAIL"
    assert f"missing 8 file(s), e.g. {tmp_path / 'suite'}" in check["observed"]
    assert "Slurm runs PlugStackConfig=(null)" in check["observed"]
    assert "gantry site install-plugins" in check["action"]


def test_an_unreachable_slurm_fails(embedded_cluster: EmbeddedCluster, tmp_path: Path) -> None:
    site = variant(embedded_cluster, tmp_path, slurm={"run_dir": str(tmp_path / "nothing")})
    env = {k: v for k, v in embedded_cluster.env.items() if k != "SLURM_CONF"}
    result = subprocess.run([sys.executable, "-m", "launcher", "site", "check", "--site",
                             str(site), "--json"], capture_output=True, text=True,
                            cwd=REPO_ROOT, env=env, timeout=60, check=False)
    assert result.returncode == 1, result.stdout + result.stderr
    checks = checks_of(result)
    assert list(checks) == ["slurm", "build"]
    assert checks["slurm"]["status"] == "FAIL"
    # no config where the site's run dir says (or, where /etc/slurm has one, no controller)
    assert re.match(r"no Slurm config at |Slurm not reachable", checks["slurm"]["observed"])
    assert "gantry cluster up" in checks["slurm"]["action"]


def test_a_bad_site_file_is_one_line(embedded_cluster: EmbeddedCluster, tmp_path: Path) -> None:
    site = variant(embedded_cluster, tmp_path, nodes={"gpus_per_node": "eight"})
    result = site_check(embedded_cluster, site)
    assert result.returncode == 2
    assert result.stdout == ""
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ")
    assert "nodes.gpus_per_node" in lines[0] and "'eight'" in lines[0]


def site_topology(cluster: EmbeddedCluster, site: Path, *extra: str,
                  env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "launcher", "site", "topology", "--site",
                           str(site), *extra], capture_output=True, text=True, cwd=REPO_ROOT,
                          env=env or cluster.env, timeout=120, check=False)


@pytest.mark.parametrize("name", ["slurm-topology.conf", "slurm-topology.yaml"])
def test_slurms_topology_written_for_the_site_round_trips(embedded_cluster: EmbeddedCluster,
                                                          tmp_path: Path, name: str) -> None:
    out = tmp_path / name
    written = site_topology(embedded_cluster, embedded_cluster.site_path, "--out", str(out))
    assert written.returncode == 0, written.stderr
    assert written.stdout.splitlines()[0] == (
        f"wrote {out}: tree topology, 7 switches, 8 nodes (from scontrol show topology)")
    assert f"topology: {{plugin: tree, file: {out.resolve()}}}" in written.stdout
    printed = site_topology(embedded_cluster, embedded_cluster.site_path,
                            "--format", "yaml" if name.endswith(".yaml") else "conf")
    assert printed.stdout == out.read_text()
    site = variant(embedded_cluster, tmp_path, topology={"plugin": "tree", "switches": [],
                                                         "file": str(out)})
    checks = checks_of(site_check(embedded_cluster, site, "--json"))
    assert checks["topology"]["status"] == "PASS", checks["topology"]
    assert checks["topology"]["expected"].endswith(f"as {out}")
    # an existing file is kept
    before = out.read_text()
    again = site_topology(embedded_cluster, embedded_cluster.site_path, "--out", str(out))
    assert again.returncode == 2 and out.read_text() == before
    assert again.stderr.strip() == f"error: --out: {out} exists (expected a new file, or pass " \
        "--force)"


def test_site_topology_without_slurm_is_one_line(embedded_cluster: EmbeddedCluster,
                                                 tmp_path: Path) -> None:
    site = variant(embedded_cluster, tmp_path, slurm={"run_dir": str(tmp_path / "nothing")})
    env = {k: v for k, v in embedded_cluster.env.items() if k != "SLURM_CONF"}
    result = site_topology(embedded_cluster, site, "--out", str(tmp_path / "t.conf"), env=env)
    assert result.returncode == 1
    assert result.stderr.startswith("error: no Slurm config at ") or \
        result.stderr.startswith("error: Slurm not reachable")
    assert len(result.stderr.strip().splitlines()) == 1
