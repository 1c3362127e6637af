"""Parsers and writers: topology.conf, topology.yaml, scontrol output, the site section.

Round trips, Slurm's handling of messy files (with warnings), and every malformed input giving
``file:line: what is wrong`` (exit 2 through the CLI, no traceback).
"""

from __future__ import annotations

import shlex
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from launcher.errors import UserInputError
from launcher.site_config import DEFAULT_SITE, load_site
from launcher.site_topology import site_topology
from tests.unit.topology_helpers import conf
from topology import hostlists
from topology.build import build_topology
from topology.conf_format import parse_topology_conf, split_words, write_topology_conf
from topology.model import Topology
from topology.scontrol_format import parse_scontrol_topology
from topology.synthetic import fat_tree_conf, nvl72_conf
from topology.yaml_format import parse_topology_yaml, write_topology_yaml

TREE = """# two racks
SwitchName=leaf1 Nodes=n[1-3] LinkSpeed=100   # LinkSpeed is ignored
SwitchName=leaf2 \\
    Nodes=n[4-5],n9
switchname=leaf3 nodes=n[6-8]
SwitchName=spine Switches=leaf[1-3]
"""


def _shape(topo: Topology) -> tuple[object, ...]:
    """Everything placement depends on, with names instead of ids."""
    names = topo.switch_names
    return (
        topo.kind,
        names,
        tuple(names[p] if p >= 0 else None for p in topo.switch_parent),
        tuple(int(v) for v in topo.switch_level),
        {
            topo.node_names[n]: names[int(leaf)]
            for n, leaf in enumerate(topo.node_leaf)
            if leaf >= 0
        },
        topo.block_sizes,
    )


def test_conf_tree_syntax() -> None:
    topo = conf(TREE)
    assert topo.switch_names == ("leaf1", "leaf2", "leaf3", "spine")
    assert [topo.node_names[n] for n in topo.leaf_nodes[1]] == ["n4", "n5", "n9"]
    assert topo.switch_names[int(topo.node_leaf[topo.node_ids["n7"]])] == "leaf3"
    assert topo.roots() == [3] and topo.warnings == ()


@pytest.mark.parametrize(
    "text",
    [
        TREE,
        fat_tree_conf(300, nodes_per_leaf=7, leaves_per_spine=5),
        nvl72_conf(100),
        "BlockSizes=2,4\nBlockName=b1 Nodes=n[1-2]\nBlockName=b2 Nodes=n[3-5]\n"
        "BlockName=b3 Nodes=n[6-7]\n",
        "SwitchName=a Nodes=n1\nSwitchName=b\nSwitchName=c Switches=a,b\nSwitchName=d Nodes=n2\n",
    ],
)
def test_round_trips_conf_and_yaml(text: str) -> None:
    topo = conf(text)
    again = conf(write_topology_conf(topo), source="again.conf")
    assert _shape(again) == _shape(topo)
    via_yaml = build_topology(parse_topology_yaml(write_topology_yaml(topo), "t.yaml"))
    assert _shape(via_yaml) == _shape(topo)


def test_site_section_matches_its_conf_rendering() -> None:
    site = load_site(DEFAULT_SITE)
    topo = site_topology(site)
    again = conf(write_topology_conf(topo), known=list(topo.node_names))
    assert _shape(again) == _shape(topo)


def test_topology_yaml_picks_cluster_default_or_named() -> None:
    text = """
- topology: topo1
  cluster_default: false
  tree:
    switches:
    - switch: sw_root
      children: s[1-2]
    - switch: s1
      nodes: node[01-02]
    - switch: s2
      nodes: node[03-04]
- topology: topo2
  cluster_default: true
  block:
    block_sizes: [4, 8]
    blocks:
    - block: b1
      nodes: node[01-04]
    - block: b2
      nodes: node[05-08]
- topology: topo3
  flat: true
"""
    default = build_topology(parse_topology_yaml(text, "t.yaml"))
    assert default.kind == "block" and default.block_sizes == (4, 8)
    named = build_topology(parse_topology_yaml(text, "t.yaml", name="topo1"))
    assert named.kind == "tree" and named.switch_names[named.roots()[0]] == "sw_root"
    flat = build_topology(parse_topology_yaml(text, "t.yaml", name="topo3"), ["a", "b"])
    assert flat.kind == "flat" and flat.node_count == 2


SCONTROL_2205_TREE = """\
SwitchName=leaf1 Level=0 LinkSpeed=1 Nodes=n[1-2]
SwitchName=leaf2 Level=0 LinkSpeed=1 Nodes=n[3-4]
SwitchName=leaf3 Level=0 LinkSpeed=1 Nodes=n[5-6]
SwitchName=leaf4 Level=0 LinkSpeed=1 Nodes=n[7-8]
SwitchName=spine1 Level=1 LinkSpeed=1 Nodes=n[1-4] Switches=leaf[1-2]
SwitchName=spine2 Level=1 LinkSpeed=1 Nodes=n[5-8] Switches=leaf[3-4]
SwitchName=core Level=2 LinkSpeed=1 Nodes=n[1-8] Switches=spine[1-2]
"""

SCONTROL_2411_BLOCK = """\
BlockName=b1 BlockIndex=0 Nodes=n[1-4] BlockSize=4
BlockName=b2 BlockIndex=1 Nodes=n[5-8] BlockSize=4
BlockName=b3 BlockIndex=2 Nodes=n[9-12] BlockSize=4
BlockName=b4 BlockIndex=3 Nodes=n[13-16] BlockSize=4
AggregatedBlock=b[1-2] BlockIndex=4 Nodes=n[1-8] BlockSize=8
AggregatedBlock=b[3-4] BlockIndex=5 Nodes=n[9-16] BlockSize=8
AggregatedBlock=b[1-4] BlockIndex=6 Nodes=n[1-16] BlockSize=16
"""


def test_scontrol_tree_matches_site() -> None:
    from_scontrol = build_topology(parse_scontrol_topology(SCONTROL_2205_TREE))
    assert _shape(from_scontrol) == _shape(site_topology(load_site(DEFAULT_SITE)))


def test_scontrol_block_recovers_block_sizes() -> None:
    topo = build_topology(parse_scontrol_topology(SCONTROL_2411_BLOCK))
    same = conf(
        "BlockSizes=4,8,16\n"
        + "".join(f"BlockName=b{i} Nodes=n[{4 * i - 3}-{4 * i}]\n" for i in range(1, 5))
    )
    assert _shape(topo) == _shape(same)
    assert "b[1-2]" in topo.switch_names


# ---- messy files: accepted as Slurm accepts them, with a warning saying how -----------------


def test_node_under_two_leaf_switches_goes_to_the_first() -> None:
    topo = conf("SwitchName=a Nodes=n[1-2]\nSwitchName=b Nodes=n[2-3]\nSwitchName=t Switches=a,b\n")
    assert topo.switch_names[int(topo.node_leaf[topo.node_ids["n2"]])] == "a"
    assert [topo.node_names[n] for n in topo.leaf_nodes[1]] == ["n3"]
    assert any("multiple leaf switches contain nodes n2" in w for w in topo.warnings)


def test_switch_with_two_parents_belongs_to_the_last() -> None:
    topo = conf(
        "SwitchName=a Nodes=n1\nSwitchName=b Nodes=n2\n"
        "SwitchName=p Switches=a,b\nSwitchName=q Switches=a\nSwitchName=top Switches=p,q\n"
    )
    assert topo.switch_names[topo.switch_parent[topo.switch_ids["a"]]] == "q"
    assert any("'a' is a child of p, q" in w for w in topo.warnings)
    # depth-first order still lists every leaf once
    assert sorted(int(s) for s in topo.leaf_order) == [0, 1]


def test_unknown_and_missing_nodes_are_reported() -> None:
    topo = conf("SwitchName=a Nodes=n[1-2],x9\n", known=["n1", "n2", "n3"])
    assert "x9" not in topo.node_ids
    assert topo.unconnected_nodes() == ["n3"]
    assert any("x9" in w and "not nodes of the site" in w for w in topo.warnings)
    assert any("lack access to 1 nodes (n3)" in w for w in topo.warnings)


def test_node_in_two_blocks_goes_to_the_first() -> None:
    topo = conf("BlockName=b1 Nodes=n[1-2]\nBlockName=b2 Nodes=n[2-4]\n")
    assert topo.switch_names[int(topo.node_leaf[topo.node_ids["n2"]])] == "b1"
    assert any("more than one block" in w for w in topo.warnings)


# ---- malformed input: file:line: what is wrong --------------------------------------------

MALFORMED_CONF = [
    (
        "SwitchName=a Nodes=n[1-2]\nSwitchName=a Nodes=n3\n",
        "t.conf:2: switch 'a' is already defined at t.conf:1",
    ),
    ("SwitchName=a Nodes=n1 Switches=b\n", "t.conf:1: switch 'a' has both Nodes= and Switches="),
    (
        "SwitchName=s Switches=x\n",
        "t.conf:1: switch 's' lists child 'x', which is not a defined switch",
    ),
    ("SwitchName=s Switches=s\n", "t.conf:1: switch 's' lists itself as a child"),
    (
        "SwitchName=a Switches=b\nSwitchName=b Switches=a\n",
        "switch configuration is not a tree (cycle",
    ),
    ("SwitchName=a Nodes=n[1-\n", "t.conf:1: Nodes: bad hostlist 'n[1-'"),
    ("SwitchName=a Colour=red\n", "t.conf:1: unknown key 'Colour' on a SwitchName line"),
    ("SwitchName=a LinkSpeed=fast Nodes=n1\n", "t.conf:1: LinkSpeed='fast' is not allowed"),
    ("\n\nFrobnicate=1\n", "t.conf:3: unknown key 'Frobnicate'"),
    (
        "SwitchName=a Nodes=n1\nBlockName=b Nodes=n2\n",
        "t.conf:2: BlockName= in a file that has tree lines",
    ),
    ("BlockName=b1\n", "t.conf:1: block 'b1' has no Nodes="),
    ("BlockSizes=4,6\nBlockName=b1 Nodes=n[1-4]\n", "t.conf:1: BlockSizes value 6 is not allowed"),
    ("BlockSizes=x\n", "t.conf:1: BlockSizes value 'x' is not allowed"),
    (
        "BlockSizes=4\nBlockName=b1 Nodes=n[1-4]\nBlockName=b2 Nodes=n[5-7]\n",
        "t.conf:3: block 'b2' has 3 nodes, fewer than the base block size 4",
    ),
    (
        "BlockName=b1 Nodes=n1\nBlockName=b1 Nodes=n2\n",
        "t.conf:2: block 'b1' is already defined at t.conf:1",
    ),
    ("SwitchName=a Nodes=n1 Nodes=n2\n", "t.conf:1: Nodes= is given twice"),
    ("SwitchName=a Nodes=\n", "t.conf:1: Nodes= is empty"),
    ('SwitchName=a Nodes="n1\n', "t.conf:1: cannot parse the line"),
    ("# only a comment\n", "t.conf: no SwitchName= or BlockName= lines"),
    (
        "SwitchName=a \\\n  Nodes=n1\nSwitchName=a Nodes=n2\n",
        "t.conf:3: switch 'a' is already defined at t.conf:1",
    ),
    ("SwitchName=" + "x" * 70 + " Nodes=n1\n", "t.conf:1: switch name"),
    ("SwitchName=a Nodes=n1 stray\n", "t.conf:1: 'stray' is not Key=Value"),
    # Past Python's int-string limit (4,300 digits): one line, not ValueError "Exceeds the limit".
    ("BlockSizes=2," + "9" * 5000 + "\nBlockName=b1 Nodes=n[1-4]\n",
     "t.conf:1: BlockSizes value '999"),
    ("BlockSizes=\u00b2\nBlockName=b1 Nodes=n[1-4]\n", "t.conf:1: BlockSizes value '\u00b2'"),
    ("SwitchName=a LinkSpeed=" + "9" * 5000 + " Nodes=n1\n", "t.conf:1: LinkSpeed='999"),
    ("SwitchName=a Nodes=n[1-" + "9" * 5000 + "]\n", "(a number of 5000 digits; expected at most"),
]


@pytest.mark.parametrize(("text", "message"), MALFORMED_CONF)
def test_malformed_conf_names_file_and_line(text: str, message: str) -> None:
    with pytest.raises(UserInputError) as info:
        conf(text)
    assert message in str(info.value)
    assert str(info.value).startswith("t.conf")


MALFORMED_YAML = [
    (
        "- topology: a\n  tree:\n    switches:\n    - switch: s\n      colour: red\n",
        "t.yaml:5: unknown key 'colour' in a switch",
    ),
    ("topology: a\n", "t.yaml:1: the top level must be a list"),
    (
        "- topology: a\n  tree: {switches: []}\n  flat: true\n",
        "t.yaml:1: topology 'a' must have exactly one of tree, block, flat",
    ),
    (
        "- topology: a\n  block:\n    block_sizes: [x]\n    blocks: []\n",
        "t.yaml:3: block_sizes entry 'x' is not allowed (expected a int)",
    ),
    ("- topology: [\n", "t.yaml:2:"),
    (
        "- topology: a\n  tree:\n    switches:\n    - nodes: n1\n",
        "t.yaml:4: a switch needs 'switch: <name>'",
    ),
    (
        "- topology: a\n  flat: true\n- topology: b\n  flat: true\n",
        "t.yaml: 2 topologies and none has cluster_default",
    ),
    (
        "- topology: a\n  cluster_default: maybe\n  flat: true\n",
        "t.yaml:2: cluster_default 'maybe' is not allowed",
    ),
    (
        "- topology: a\n  block:\n    blocks:\n    - block: b1\n",
        "t.yaml:4: block 'b1' has no nodes",
    ),
    (
        "- topology: a\n  tree:\n    switches:\n    - switch: s\n      children: t\n",
        "t.yaml:4: switch 's' lists child 't'",
    ),
]


@pytest.mark.parametrize(("text", "message"), MALFORMED_YAML)
def test_malformed_yaml_names_file_and_line(text: str, message: str) -> None:
    with pytest.raises(UserInputError) as info:
        build_topology(parse_topology_yaml(text, "t.yaml"), ["n1"])
    assert message in str(info.value)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("SwitchName=a Level=x Nodes=n1\n",
         "scontrol show topology:1: Level='x' is not an integer"),
        ("Hello\n", "scontrol show topology:1: 'Hello' is not a SwitchName="),
        ("", "no topology information"),
        (
            "BlockName=b1 BlockIndex=0 BlockSize=4\n",
            "scontrol show topology:1: block 'b1' lists no Nodes=",
        ),
        ("SwitchName=a Level=" + "9" * 5000 + " Nodes=n1\n",
         "scontrol show topology:1: Level='9999"),
        ("SwitchName=a Level=\u00b2 Nodes=n1\n", "scontrol show topology:1: Level='\u00b2'"),
        ("BlockName=b1 Nodes=n[1-4] BlockSize=" + "9" * 5000 + "\n",
         "scontrol show topology:1: BlockSize='9999"),
    ],
)
def test_malformed_scontrol_output(text: str, message: str) -> None:
    with pytest.raises(UserInputError, match=message.replace("(", r"\(").replace("[", r"\[")):
        build_topology(parse_scontrol_topology(text))


@pytest.mark.parametrize("expression", [
    "n[1-" + "9" * 5000 + "]", "n" + "9" * 5000, "n[00-" + "9" * 4400 + "]", "n" + "1" * 65,
])
def test_hostlist_numbers_longer_than_a_host_name_are_refused(expression: str) -> None:
    with pytest.raises(UserInputError, match=r"--nodes: bad hostlist .* \(a number of \d+ "
                       r"digits; expected at most 64"):
        hostlists.expand(expression, "--nodes")
    with pytest.raises(UserInputError, match=r"x: cannot write these names as a hostlist "
                       r"\(a number of \d+ digits"):
        hostlists.collect(["n1", expression.replace("[", "").replace("]", "")], "x")
    assert hostlists.expand("n" + "1" * 64) == ["n" + "1" * 64]


def test_site_section_errors_name_the_field(tmp_path: Path) -> None:
    data = yaml.safe_load(DEFAULT_SITE.read_text())
    data["topology"]["switches"].append({"name": "spine3", "switches": "leaf9"})
    path = tmp_path / "site.yaml"
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(UserInputError, match=r"topology\.switches\[7\]\.switches: 'leaf9' is not"):
        site_topology(load_site(path))


def test_cli_reports_malformed_topology_file_in_one_line(tmp_path: Path) -> None:
    (tmp_path / "topology.conf").write_text("SwitchName=a Nodes=n[1-8]\nSwitchName=b Switches=zz\n")
    data = yaml.safe_load(DEFAULT_SITE.read_text())
    data["topology"] = {"plugin": "tree", "file": "topology.conf"}
    site = tmp_path / "site.yaml"
    site.write_text(yaml.safe_dump(data))
    result = subprocess.run(
        [sys.executable, "-m", "launcher", "plan", "--site", str(site), "--nodes", "2"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 2
    assert result.stderr.splitlines() == [
        f"error: {tmp_path / 'topology.conf'}:2: switch 'b' lists child 'zz', "
        "which is not a defined switch"
    ]
    assert result.stdout == ""


def test_node_arrays_are_integer_arrays() -> None:
    topo = conf(fat_tree_conf(1000))
    assert topo.node_leaf.dtype == np.int32 and topo.switch_parent.dtype == np.int32


@settings(max_examples=2000, deadline=None)
@given(st.text(alphabet="ab =\\'\"#\t,\n\r\x0b\xa0", max_size=16))
def test_line_words_split_as_posix_shlex_does(line: str) -> None:
    try:
        expected: list[str] | None = shlex.split(line, posix=True)
    except ValueError:
        expected = None
    try:
        got: list[str] | None = split_words(line)
    except ValueError:
        got = None
    assert got == expected


def test_a_long_nodes_list_on_one_line_parses() -> None:
    names = [f"node{i}" for i in range(20000)]
    doc = parse_topology_conf(f"SwitchName=s1 Nodes={','.join(names)}\n", "big.conf")
    assert doc.switches[0].nodes == ",".join(names)
