"""The topology model: tiers, lowest common switch, roots, depth-first spans, synthetic sites."""

from __future__ import annotations

from launcher.site_config import DEFAULT_SITE, load_site
from launcher.site_topology import site_topology
from tests.unit.topology_helpers import conf
from topology.build import build_topology
from topology.conf_format import parse_topology_conf
from topology.synthetic import fat_tree_conf, node_name, nvl72_conf


def test_local_site_tiers_and_common_switches() -> None:
    topo = site_topology(load_site(DEFAULT_SITE))
    ids = topo.node_ids
    assert topo.kind == "tree" and topo.depth == 3
    assert topo.tier(ids["n1"], ids["n1"]) == 0
    assert topo.tier(ids["n1"], ids["n2"]) == 1
    assert topo.tier(ids["n1"], ids["n3"]) == 2
    assert topo.tier(ids["n1"], ids["n8"]) == 3
    assert topo.switch_names[topo.lowest_common_switch([ids["n5"], ids["n8"]]) or 0] == "spine2"
    assert [topo.switch_names[r] for r in topo.roots()] == ["core"]
    assert [topo.switch_names[s] for s in topo.leaves_under(topo.switch_ids["spine2"])] == [
        "leaf3",
        "leaf4",
    ]
    assert topo.warnings == ()


def test_switches_without_common_parent_have_no_tier() -> None:
    topo = conf(
        "SwitchName=a Nodes=n[1-2]\nSwitchName=b Nodes=n[3-4]\n"
        "SwitchName=s1 Switches=a\nSwitchName=s2 Switches=b\n"
    )
    assert sorted(topo.switch_names[r] for r in topo.roots()) == ["s1", "s2"]
    assert topo.tier(topo.node_ids["n1"], topo.node_ids["n3"]) is None
    assert any("no common parent" in w for w in topo.warnings)


def test_depth_of_any_tree() -> None:
    lines = ["SwitchName=l0 Nodes=x1"]
    for level in range(1, 7):
        lines.append(f"SwitchName=l{level} Switches=l{level - 1}")
    topo = conf("\n".join(lines))
    assert topo.depth == 7
    assert topo.tier(0, 0) == 0
    assert topo.ancestors(0) == list(range(7))


def test_block_aggregation_follows_slurm() -> None:
    text = "BlockSizes=2,8\n" + "".join(
        f"BlockName=b{i} Nodes=n[{2 * i - 1}-{2 * i}]\n" for i in range(1, 7)
    )
    topo = conf(text)
    assert topo.block_sizes == (2, 8)
    # 6 blocks, groups of 4: b[1-4] and the short tail b[5-6] (Slurm keeps it: 4 > 2, 1 < 2).
    names = topo.switch_names
    assert "b[1-4]" in names and "b[5-6]" in names
    assert names[topo.switch_parent[topo.switch_ids["b5"]]] == "b[5-6]"
    assert topo.tier(topo.node_ids["n1"], topo.node_ids["n3"]) == 2
    assert topo.tier(topo.node_ids["n1"], topo.node_ids["n12"]) == 3  # via the whole topology


def test_synthetic_sites_have_27500_nodes() -> None:
    tree = build_topology(parse_topology_conf(fat_tree_conf(), "fat-tree"))
    assert tree.node_count == 27_500 and tree.depth == 3
    assert len(tree.roots()) == 1 and tree.warnings == ()
    names = [node_name(i) for i in range(1, 27_501)]
    blocks = build_topology(parse_topology_conf(nvl72_conf(), "nvl72"), names)
    assert blocks.node_count == 27_500
    assert blocks.declared_switches == 3055
    assert blocks.block_sizes == (9, 36, 144, 576, 2304)
    assert blocks.unconnected_nodes() == names[-5:]
    assert any("blocks lack access to 5 nodes" in w for w in blocks.warnings)


def test_example_large_site_loads_its_generated_file() -> None:
    site = load_site(DEFAULT_SITE.parent / "example-large.yaml")
    topo = site_topology(site)
    assert topo.kind == "block" and topo.node_count == 27_500
    regenerated = build_topology(parse_topology_conf(nvl72_conf(), "nvl72"), topo.node_names)
    assert regenerated.switch_names == topo.switch_names
