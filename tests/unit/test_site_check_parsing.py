"""The pure parts of `gantry site check`: scontrol's config and one-line records, GPUs in a
Gres= value, which node states take no jobs, and the topology comparison on block sites (the
embedded cluster runs Slurm 22.05, which has no topology/block: its tests cover trees)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from launcher.site_check.live_facts import LiveFacts, parse_one_line_records, parse_show_config
from launcher.site_check.node_checks import gres_gpus, unschedulable
from launcher.site_check.results import SiteCheck, worst
from launcher.site_check.topology_checks import check_topology_layout, check_topology_plugin
from launcher.site_config import LoadedSite, load_site

CONFIG = """Configuration data as of 2026-12-02T07:00:00
AccountingStorageType   = accounting_storage/none
HealthCheckInterval     = 300 sec
SlurmctldHost[0]        = vm(localhost)
SLURM_VERSION           = 24.11.1
TopologyPlugin          = topology/block

Cgroup Support Configuration:
TopologyPlugin          = shadowed
"""


def test_show_config_keys_values_first_wins() -> None:
    config = parse_show_config(CONFIG)
    assert config["HealthCheckInterval"] == "300 sec"
    assert config["SlurmctldHost[0]"] == "vm(localhost)"
    assert config["TopologyPlugin"] == "topology/block"
    assert "Configuration" not in config


def test_one_line_records_by_key() -> None:
    text = ("NodeName=g1 Arch=x86_64 CPUTot=96 Gres=gpu:h200:8(S:0-1) RealMemory=2000000 "
            "State=IDLE OS=Linux 6.8 #1 SMP Reason=x\n"
            "NodeName=g2 CPUTot=96 Gres=(null) State=DOWN*\n\nnot a record\n")
    records = parse_one_line_records(text, "NodeName")
    assert list(records) == ["g1", "g2"]
    assert records["g1"]["Gres"] == "gpu:h200:8(S:0-1)"
    assert records["g1"]["OS"] == "Linux"
    assert records["g2"]["State"] == "DOWN*"


@pytest.mark.parametrize(("gres", "gpus"), [
    ("gpu:8", 8), ("gpu:h200:8(S:0-1)", 8), ("gpu:h200:4(S:0),gpu:a100:4(S:1)", 8),
    ("(null)", 0), ("", 0), ("shard:16,gpu:2", 2), ("gpunic:3", 0), ("mps:100", 0),
])
def test_gpus_in_gres(gres: str, gpus: int) -> None:
    assert gres_gpus(gres) == gpus


@pytest.mark.parametrize(("state", "out"), [
    ("IDLE", False), ("MIXED", False), ("ALLOCATED", False), ("IDLE+DRAIN", True),
    ("DOWN*", True), ("IDLE*", True), ("MIXED+DRAIN", True), ("IDLE+NOT_RESPONDING", True),
    ("FUTURE", True), ("ALLOCATED+COMPLETING", False), ("IDLE+POWERED_DOWN", True),
])
def test_unschedulable_states(state: str, out: bool) -> None:
    assert unschedulable(state) is out


def test_worst_status() -> None:
    assert worst([]) == "ok"
    assert worst([SiteCheck("a", "skip", ""), SiteCheck("b", "ok", "")]) == "ok"
    assert worst([SiteCheck("a", "warn", ""), SiteCheck("b", "skip", "")]) == "warn"
    assert worst([SiteCheck("a", "fail", ""), SiteCheck("b", "warn", "")]) == "fail"


def block_site(tmp_path: Path, blocks: list[dict[str, str]]) -> LoadedSite:
    path = tmp_path / "site.yaml"
    path.write_text(yaml.safe_dump({
        "name": "blocks", "nodes": {"names": "g[1-8]"},
        "topology": {"plugin": "block", "blocks": blocks}}))
    return load_site(path)


def facts(version: str, topology: str) -> LiveFacts:
    config = {"SLURM_VERSION": version, "TopologyPlugin": "topology/block"}
    return LiveFacts(config, {}, {}, {}, topology)


SLURM_BLOCKS = """BlockName=b1 BlockIndex=0 Nodes=g[1-4] BlockSize=4
BlockName=b2 BlockIndex=1 Nodes=g[5-8] BlockSize=4
AggregatedBlock=b[1-2] BlockIndex=2 Nodes=g[1-8] BlockSize=8
"""


def test_block_topology_same_groups_other_names(tmp_path: Path) -> None:
    site = block_site(tmp_path, [{"name": "rack1", "nodes": "g[1-4]"},
                                 {"name": "rack2", "nodes": "g[5-8]"}])
    check = check_topology_layout(site, facts("24.11.1", SLURM_BLOCKS))
    assert check.status == "ok", check
    assert check.observed.startswith("2 blocks")
    assert check_topology_plugin(site, facts("24.11.1", SLURM_BLOCKS)).status == "ok"


def test_block_topology_other_groups_fail(tmp_path: Path) -> None:
    site = block_site(tmp_path, [{"name": "rack1", "nodes": "g[1-2],g[5-6]"},
                                 {"name": "rack2", "nodes": "g[3-4],g[7-8]"}])
    check = check_topology_layout(site, facts("24.11.1", SLURM_BLOCKS))
    assert check.status == "fail"
    assert check.observed == ("only in the site: rack1 = g[1-2,5-6], rack2 = g[3-4,7-8]; "
                              "only in Slurm: b1 = g[1-4], b2 = g[5-8]")


def test_block_site_on_an_old_slurm_fails(tmp_path: Path) -> None:
    site = block_site(tmp_path, [{"name": "rack1", "nodes": "g[1-4]"},
                                 {"name": "rack2", "nodes": "g[5-8]"}])
    check = check_topology_plugin(site, facts("22.05.8", ""))
    assert check.status == "fail"
    assert check.observed == "Slurm 22.05.8 has no topology/block"
