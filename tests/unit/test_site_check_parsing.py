"""The pure parts of `gantry site check`: scontrol's config and one-line records, GPUs in a
Gres= value, which node states take no jobs, and the topology comparison on block sites (the
embedded cluster runs Slurm 22.05, which has no topology/block: its tests cover trees)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from launcher.errors import UserInputError
from launcher.preflight.drain_policy import NodeState
from launcher.preflight.result import worst
from launcher.site_check.live_facts import LiveFacts, parse_one_line_records, parse_show_config
from launcher.site_check.node_checks import gres_gpus, node_info
from launcher.site_check.run import check_site
from launcher.site_check.setup_checks import check_plugins, plugin_plan, setting_in_effect
from launcher.site_check.slurm_topology import render_topology, topology_format, write_new_file
from launcher.site_check.topology_checks import (
    check_topology_layout,
    check_topology_plugin,
    site_groups,
)
from launcher.site_config import LoadedSite, load_site
from launcher.site_topology import load_topology_file
from topology.build import build_topology
from topology.scontrol_format import parse_scontrol_topology

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
    ("gpu:h100:no_consume:8", 8), ("gpu:no_consume:2", 2), ("gpu:1K", 1024), ("gpu", 1),
])
def test_gpus_in_gres(gres: str, gpus: int) -> None:
    assert gres_gpus(gres) == gpus


@pytest.mark.parametrize(("state", "usable"), [
    ("IDLE", True), ("MIXED", True), ("ALLOCATED", True), ("IDLE+DRAIN", False),
    ("DOWN*", False), ("IDLE*", False), ("MIXED+DRAIN", False), ("IDLE+NOT_RESPONDING", False),
    ("FUTURE", False), ("ALLOCATED+COMPLETING", True), ("IDLE+POWERED_DOWN", False),
    ("IDLE~", False), ("IDLE+RESERVED", False), ("MIXED-", True), ("IDLE+CLOUD", True),
    ("DOWN*+DRAIN", False), ("IDLE+INVALID_REG", False), ("INVAL", False),
    ("IDLE+REBOOT_ISSUED", False),
])
def test_node_states_in_the_planners_terms(state: str, usable: bool) -> None:
    assert node_info(NodeState("n1", state)).usable is usable


def test_worst_status() -> None:
    assert worst([]) == "PASS"
    assert worst(["SKIP", "PASS"]) == "PASS"
    assert worst(["WARN", "SKIP"]) == "WARN"
    assert worst(["FAIL", "WARN"]) == "FAIL"


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
    assert check.status == "PASS", check
    assert check.observed.startswith("2 blocks")
    assert check_topology_plugin(site, facts("24.11.1", SLURM_BLOCKS)).status == "PASS"


def test_block_topology_other_groups_fail(tmp_path: Path) -> None:
    site = block_site(tmp_path, [{"name": "rack1", "nodes": "g[1-2],g[5-6]"},
                                 {"name": "rack2", "nodes": "g[3-4],g[7-8]"}])
    check = check_topology_layout(site, facts("24.11.1", SLURM_BLOCKS))
    assert check.status == "FAIL"
    assert check.observed == ("only in the site: rack1 = g[1-2,5-6], rack2 = g[3-4,7-8]; "
                              "only in Slurm: b1 = g[1-4], b2 = g[5-8]")


def test_block_site_on_an_old_slurm_fails(tmp_path: Path) -> None:
    site = block_site(tmp_path, [{"name": "rack1", "nodes": "g[1-4]"},
                                 {"name": "rack2", "nodes": "g[5-8]"}])
    check = check_topology_plugin(site, facts("22.05.8", ""))
    assert check.status == "FAIL"
    assert check.observed == "Slurm 22.05.8 has no topology/block"


def test_a_site_covering_part_of_slurms_blocks(tmp_path: Path) -> None:
    """Slurm has a block of other nodes (b3): the site's own nodes still compare equal."""
    site = block_site(tmp_path, [{"name": "rack1", "nodes": "g[1-4]"},
                                 {"name": "rack2", "nodes": "g[5-8]"}])
    text = SLURM_BLOCKS.replace("AggregatedBlock", "BlockName=b3 BlockIndex=2 Nodes=g[9-12] "
                                "BlockSize=4\nAggregatedBlock")
    check = check_topology_layout(site, facts("24.11.1", text))
    assert check.status == "PASS", check


def test_block_sizes_that_differ_warn(tmp_path: Path) -> None:
    site = block_site(tmp_path, [{"name": "rack1", "nodes": "g[1-4]"},
                                 {"name": "rack2", "nodes": "g[5-8]"}])
    text = SLURM_BLOCKS.replace("BlockSize=4", "BlockSize=2").replace("BlockSize=8", "BlockSize=4")
    check = check_topology_layout(site, facts("24.11.1", text))
    assert check.status == "WARN"
    assert "Slurm's block sizes are [2, 4]" in check.observed


def tree_site(tmp_path: Path) -> LoadedSite:
    path = tmp_path / "site.yaml"
    path.write_text(yaml.safe_dump({
        "name": "tree", "nodes": {"names": "n[1-4]"},
        "topology": {"plugin": "tree", "switches": [
            {"name": "l1", "nodes": "n[1-2]"}, {"name": "l2", "nodes": "n[3-4]"},
            {"name": "top", "switches": "l[1-2]"}]}}))
    return load_site(path)


def test_tree_inside_a_bigger_cluster(tmp_path: Path) -> None:
    """Slurm's tree has a third leaf of other nodes: the spine over all three still holds
    exactly the site's four nodes, so the grouping is the same."""
    text = ("SwitchName=s0 Level=0 LinkSpeed=1 Nodes=n[1-2]\n"
            "SwitchName=s1 Level=0 LinkSpeed=1 Nodes=n[3-4]\n"
            "SwitchName=s2 Level=0 LinkSpeed=1 Nodes=x[1-2]\n"
            "SwitchName=spine Level=1 LinkSpeed=1 Nodes=n[1-4],x[1-2] Switches=s[0-2]\n")
    live = LiveFacts({"SLURM_VERSION": "22.05.8", "TopologyPlugin": "topology/tree"}, {}, {},
                     {}, text)
    assert check_topology_layout(tree_site(tmp_path), live).status == "PASS"
    moved = text.replace("Nodes=n[3-4]", "Nodes=n3").replace("Nodes=x[1-2]\n", "Nodes=x[1-2],n4\n")
    check = check_topology_layout(tree_site(tmp_path), LiveFacts(live.config, {}, {}, {}, moved))
    assert check.status == "FAIL"
    assert check.observed == ("only in the site: l2 = n[3-4]; only in Slurm: s1 = n3, s2 = n4")


def test_flat_site_expects_no_plugin(tmp_path: Path) -> None:
    path = tmp_path / "site.yaml"
    path.write_text(yaml.safe_dump({"name": "flat", "nodes": {"names": "c[1-2]"}}))
    site = load_site(path)
    live = LiveFacts({"TopologyPlugin": "topology/tree"}, {}, {}, {}, "")
    check = check_topology_plugin(site, live)
    assert check.status == "FAIL"
    assert check.expected == "TopologyPlugin=topology/flat (topology.plugin: flat)"


def test_a_topology_yaml_without_topology_plugin_is_accepted(tmp_path: Path) -> None:
    """Slurm 25.05+: topology.yaml defines the topology; TopologyPlugin= may stay unset."""
    site = block_site(tmp_path, [{"name": "rack1", "nodes": "g[1-4]"},
                                 {"name": "rack2", "nodes": "g[5-8]"}])
    live = LiveFacts({"SLURM_VERSION": "25.05.3"}, {}, {}, {}, SLURM_BLOCKS)
    check = check_topology_plugin(site, live)
    assert check.status == "PASS", check
    assert "Slurm reports a block topology" in check.observed


@pytest.mark.parametrize(("key", "wanted", "running", "ok"), [
    ("HealthCheckInterval", "300", "300 sec", True),
    ("HealthCheckInterval", "300", "600 sec", False),
    ("Prolog", "/p/gantry-prolog.sh", "/etc/slurm/a.sh,/p/gantry-prolog.sh", True),
    ("Prolog", "/p/gantry-prolog.sh", "/p/*.sh", True),
    ("Prolog", "/p/gantry-prolog.sh", "/q/*.sh", False),
    ("Epilog", "/p/gantry-epilog.sh", "(null)", False),
    ("HealthCheckNodeState", "ANY", "ANY", True),
])
def test_settings_in_effect(key: str, wanted: str, running: str, ok: bool) -> None:
    assert setting_in_effect(key, wanted, running) is ok


def test_a_site_plugstack_that_includes_gantrys(tmp_path: Path) -> None:
    ours = tmp_path / "gantry" / "plugstack.conf"
    site_conf = tmp_path / "plugstack.conf"
    site_conf.write_text("required /usr/lib/other.so\ninclude /elsewhere/*.conf\n")
    assert not setting_in_effect("PlugStackConfig", str(ours), str(site_conf))
    site_conf.write_text(f"# site plugins\ninclude {tmp_path}/gantry/*.conf  # gantry\n")
    assert setting_in_effect("PlugStackConfig", str(ours), str(site_conf))


SLURM_TEXT = st.text(alphabet=st.sampled_from(list("gpuGPU:=,()+*~#%$@^-!0123456789KMG nS_\n")),
                     max_size=80)


@given(SLURM_TEXT)
def test_odd_scontrol_text_never_raises(text: str) -> None:
    """Whatever a Slurm version prints, the readers do not raise (their values are pinned by
    the tests above; this one only looks for exceptions)."""
    gres_gpus(text)
    node_info(NodeState("n1", text))
    parse_show_config(text)
    parse_one_line_records(text, "NodeName")
    setting_in_effect("Prolog", "/p/x.sh", text)


@pytest.mark.parametrize("fmt", ["conf", "yaml"])
def test_slurms_blocks_written_as_a_site_file_read_back_the_same(tmp_path: Path,
                                                                 fmt: str) -> None:
    """`gantry site topology` on a 24.11 block cluster: the file it writes is read back (as a
    site's topology.file) with the same blocks and block sizes."""
    slurm = build_topology(parse_scontrol_topology(SLURM_BLOCKS))
    path = tmp_path / f"topology.{fmt}"
    write_new_file(path, render_topology(slurm, topology_format(path, None)), force=False)
    back = load_topology_file(path)
    assert back.kind == "block" and back.block_sizes == slurm.block_sizes == (4, 8)
    assert site_groups(back) == site_groups(slurm)
    with pytest.raises(UserInputError, match="exists"):
        write_new_file(path, "x", force=False)


def test_written_file_rules(tmp_path: Path) -> None:
    """--out: kept unless --force (which keeps the file's mode and writes through a link),
    a directory or a missing parent refused, nothing left beside it, --format checked
    against the extension the site will read it by."""
    out = tmp_path / "t.conf"
    write_new_file(out, "one\n", force=False)
    out.chmod(0o640)
    write_new_file(out, "two\n", force=True)
    assert out.read_text() == "two\n" and out.stat().st_mode & 0o777 == 0o640
    link = tmp_path / "link.conf"
    link.symlink_to(out)
    with pytest.raises(UserInputError, match="exists"):
        write_new_file(link, "three\n", force=False)
    write_new_file(link, "three\n", force=True)
    assert link.is_symlink() and out.read_text() == "three\n"
    dangling = tmp_path / "dangling.conf"
    dangling.symlink_to(tmp_path / "nowhere")
    with pytest.raises(UserInputError, match="exists"):
        write_new_file(dangling, "x", force=False)
    loop = tmp_path / "loop.conf"
    loop.symlink_to(loop)
    with pytest.raises(UserInputError, match="Symlink loop"):
        write_new_file(loop, "x", force=True)
    loop.unlink()
    with pytest.raises(UserInputError, match="is a directory"):
        write_new_file(tmp_path, "x", force=True)
    with pytest.raises(UserInputError, match="is not a directory"):
        write_new_file(tmp_path / "missing" / "t.conf", "x", force=False)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["dangling.conf", "link.conf", "t.conf"]
    assert topology_format(None, None) == "conf"
    assert topology_format(tmp_path / "t.yml", None) == "yaml"
    with pytest.raises(UserInputError, match="--format: yaml is not allowed with --out"):
        topology_format(out, "yaml")


def test_site_files_that_are_not_files_or_have_nul_are_one_line(tmp_path: Path) -> None:
    """Found by fuzzing the site commands: a FIFO or /dev/zero as --site, a NUL in a path, a
    newline in a node name, a link loop: each a UserInputError, never a hang or a traceback."""
    fifo = tmp_path / "fifo.yaml"
    os.mkfifo(fifo)
    with pytest.raises(UserInputError, match="not a regular file"):
        load_site(fifo)
    with pytest.raises(UserInputError, match="not a regular file"):
        load_site(Path("/dev/zero"))
    nul = tmp_path / "nul.yaml"
    nul.write_text(yaml.safe_dump({"name": "x", "nodes": {"names": "n1"},
                                   "slurm": {"run_dir": "/tmp/a\x00b"}}))
    with pytest.raises(UserInputError, match=r"slurm\.run_dir"):
        load_site(nul)
    newline = tmp_path / "newline.yaml"
    newline.write_text(yaml.safe_dump({"name": "x", "nodes": {"names": "n1\nn2"}}))
    with pytest.raises(UserInputError, match="without blanks or control characters"):
        load_site(newline).config.nodes.node_list()
    loop = tmp_path / "loop.yaml"
    loop.symlink_to(loop)
    with pytest.raises(UserInputError, match="cannot resolve"):
        load_site(loop)


def plugin_site(tmp_path: Path, plugins: dict[str, object]) -> LoadedSite:
    path = tmp_path / "site.yaml"
    path.write_text(yaml.safe_dump({
        "name": "real", "nodes": {"names": "g[1-2]"},
        "slurm": {"controller_host": "nowhere.invalid"}, "plugins": plugins}))
    return load_site(path)


def test_a_prefix_the_suite_cannot_use_is_bad_input_before_slurm_is_asked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    site = plugin_site(tmp_path, {"enabled": True, "prefix": "my plugins"})

    def never(_site: LoadedSite) -> None:
        raise AssertionError("Slurm was asked before the site file was checked")

    monkeypatch.setattr("launcher.site_check.run.probe_live_facts", never)
    with pytest.raises(UserInputError) as info:
        check_site(site)
    assert str(info.value).startswith(f"{site.path}: plugins.prefix: '{tmp_path}/my plugins' "
                                      "is not allowed (expected a path without blanks")
    assert info.value.exit_status == 2


def test_no_prefix_on_a_real_site_is_a_failed_check_saying_what_to_set(tmp_path: Path) -> None:
    site = plugin_site(tmp_path, {"enabled": True})
    assert plugin_plan(site) is None
    check = check_plugins(site, LiveFacts({}, {}, {}, {}, ""), None)
    assert (check.status, check.observed) == (
        "FAIL", "plugins.prefix is not set and the site is not embedded")
    assert "set plugins.prefix" in check.action


def test_what_this_host_holds_is_a_failed_plugins_check_not_bad_input(tmp_path: Path) -> None:
    (tmp_path / "prefix").write_text("a file, not a directory")
    site = plugin_site(tmp_path, {"enabled": True, "prefix": "prefix"})
    plan = plugin_plan(site)
    assert plan == f"{site.path}: plugins.prefix: {tmp_path}/prefix exists and is not a directory"
    check = check_plugins(site, LiveFacts({}, {}, {}, {}, ""), plan)
    assert (check.status, check.observed) == ("FAIL", plan)
    spaced = tmp_path / "my sites"
    spaced.mkdir()
    site = plugin_site(spaced, {"enabled": True, "prefix": "../suite"})
    plan = plugin_plan(site)
    assert isinstance(plan, str) and plan.startswith(f"{site.path}: the site file path: ")


def test_site_checks_and_preflight_share_one_result_type(tmp_path: Path) -> None:
    """A site check is preflight's CheckResult: the same statuses, the same action field,
    the same JSON keys as a node verdict's checks."""
    from launcher.preflight.result import STATUSES, CheckResult
    from launcher.preflight.verdict import NodeVerdict

    site = plugin_site(tmp_path, {"enabled": True})
    check = check_plugins(site, LiveFacts({}, {}, {}, {}, ""), None)
    assert isinstance(check, CheckResult) and check.status in STATUSES and check.action
    verdict = NodeVerdict(node="n1", level="quick", status="FAIL",
                          started_at="2026-12-03T00:00:00+00:00", duration_s=0.1,
                          gantry_version="0", gpu_source="none", checks=[check])
    assert verdict.to_dict()["checks"] == [check.to_json()]
