"""Golden-file tests of the embedded cluster's slurm.conf / topology.conf / mpi.conf for
Slurm 22.05 (Debian 12) and 24.11 (Debian 13), and of the version logic behind them.

Regenerate the golden files after an intended change with
``GANTRY_UPDATE_GOLDEN=1 pytest tests/unit/test_cluster_render.py`` and review the diff.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import yaml

from launcher.cluster.layout import RunLayout
from launcher.cluster.render import check_supported, node_ports, render_all
from launcher.cluster.versions import features_for
from launcher.errors import UserInputError
from launcher.site_config import DEFAULT_SITE, SiteConfig
from launcher.typed_config import from_mapping
from topology.errors import TopologyInputError
from topology.slurm_version import SlurmVersion

GOLDEN = Path(__file__).parent / "golden" / "cluster"
LAYOUT = RunLayout(Path("/run/gantry-test"))
V22 = SlurmVersion(22, 5, 8)
V24 = SlurmVersion(24, 11, 5)

BLOCK_SITE = {
    "name": "blocks",
    "slurm": {
        "embedded": True,
        "cluster_name": "gantry-blocks",
        "controller_port": 16900,
        "slurmd_port_base": 16901,
    },
    "nodes": {"names": "b[01-08]", "cpus": 4, "real_memory_mb": 4000},
    "topology": {
        "plugin": "block",
        "blocks": [{"name": "nvl1", "nodes": "b[01-04]"}, {"name": "nvl2", "nodes": "b[05-08]"}],
        "block_sizes": [4, 8],
    },
}
FLAT_SITE = {
    "name": "flat",
    "slurm": {"embedded": True, "cluster_name": "gantry-flat", "partition": "all"},
    "nodes": {"names": "c[1-3]"},
}


def _local() -> SiteConfig:
    return from_mapping(SiteConfig, yaml.safe_load(DEFAULT_SITE.read_text()), "local.yaml")


def _check_golden(name: str, text: str) -> None:
    path = GOLDEN / name
    if os.environ.get("GANTRY_UPDATE_GOLDEN") == "1":
        path.write_text(text)
    assert path.exists(), f"missing golden file {path} (run with GANTRY_UPDATE_GOLDEN=1)"
    assert text == path.read_text(), f"{name} differs from its golden file"


@pytest.mark.parametrize(("version", "tag"), [(V22, "22.05"), (V24, "24.11")])
def test_local_tree_site_matches_golden(version: SlurmVersion, tag: str) -> None:
    rendered = render_all(_local(), LAYOUT, features_for(version), "root")
    _check_golden(f"local-{tag}.slurm.conf", rendered.slurm_conf)
    assert rendered.topology_conf is not None
    _check_golden(f"local-{tag}.topology.conf", rendered.topology_conf)
    _check_golden("local.mpi.conf", rendered.mpi_conf)


def test_every_pmix_fence_is_a_ring() -> None:
    """Slurm's tree fence is node-local when TreeWidth exceeds the step's node count, so
    the embedded cluster must pin the ring collective (docs/embedded-cluster.md)."""
    rendered = render_all(_local(), LAYOUT, features_for(V22), "root")
    settings = [line for line in rendered.mpi_conf.splitlines() if not line.startswith("#")]
    assert "PMIxCollFence=ring" in settings


def test_block_site_on_24_11_matches_golden() -> None:
    site = from_mapping(SiteConfig, BLOCK_SITE, "blocks.yaml")
    features = features_for(V24)
    check_supported(site, features, "blocks.yaml")
    rendered = render_all(site, LAYOUT, features, "slurm")
    _check_golden("blocks-24.11.slurm.conf", rendered.slurm_conf)
    assert rendered.topology_conf is not None
    _check_golden("blocks-24.11.topology.conf", rendered.topology_conf)


def test_flat_site_has_no_topology() -> None:
    site = from_mapping(SiteConfig, FLAT_SITE, "flat.yaml")
    rendered = render_all(site, LAYOUT, features_for(V22), "root")
    assert rendered.topology_conf is None
    assert "TopologyPlugin" not in rendered.slurm_conf
    assert "PartitionName=all Nodes=ALL Default=YES" in rendered.slurm_conf


def test_gpu_site_gets_emulated_gpus() -> None:
    """nodes.gpus_per_node > 0: Gres=gpu:N on every node and one gres.conf line per node
    whose device files live under the run dir (links to /dev/null made by `cluster up`)."""
    site = from_mapping(SiteConfig, {**FLAT_SITE, "nodes": {"names": "c[1-3]",
                                                             "gpus_per_node": 4}}, "gpu.yaml")
    rendered = render_all(site, LAYOUT, features_for(V22), "root")
    lines = rendered.slurm_conf.splitlines()
    assert "GresTypes=gpu" in lines
    node_lines = [line for line in lines if line.startswith("NodeName=")]
    assert len(node_lines) == 3 and all(" Gres=gpu:4 " in line for line in node_lines)
    assert rendered.gres_conf is not None
    entries = [line for line in rendered.gres_conf.splitlines() if not line.startswith("#")]
    assert entries[:3] == [
        f"NodeName=c{i} Name=gpu File=/run/gantry-test/dev/c{i}/nvidia[0-3]" for i in (1, 2, 3)]
    one = from_mapping(SiteConfig, {**FLAT_SITE, "nodes": {"names": "c1", "gpus_per_node": 1}},
                       "gpu.yaml")
    assert "File=/run/gantry-test/dev/c1/nvidia0\n" in str(
        render_all(one, LAYOUT, features_for(V22), "root").gres_conf)
    local = render_all(_local(), LAYOUT, features_for(V22), "root")
    assert local.gres_conf is None and "Gres" not in local.slurm_conf


def test_block_site_on_22_05_is_bad_input() -> None:
    site = from_mapping(SiteConfig, BLOCK_SITE, "blocks.yaml")
    with pytest.raises(UserInputError) as info:
        check_supported(site, features_for(V22), "blocks.yaml")
    message = str(info.value)
    assert message.startswith("blocks.yaml: topology.plugin: 'block' is not supported")
    assert "22.05.8" in message and "23.11" in message


def test_node_ports_follow_node_order() -> None:
    ports = node_ports(_local())
    assert ports == {f"n{i}": 17000 + i for i in range(1, 9)}


def test_ports_past_65535_are_bad_input() -> None:
    data = dict(FLAT_SITE, slurm={"embedded": True, "slurmd_port_base": 65534})
    site = from_mapping(SiteConfig, data, "flat.yaml")
    with pytest.raises(UserInputError, match=r"slurm.slurmd_port_base: 65534 \+ 3 nodes"):
        check_supported(site, features_for(V22), "flat.yaml")


def test_controller_port_inside_slurmd_range_is_bad_input() -> None:
    data = dict(
        FLAT_SITE, slurm={"embedded": True, "slurmd_port_base": 20000, "controller_port": 20001}
    )
    site = from_mapping(SiteConfig, data, "flat.yaml")
    with pytest.raises(UserInputError, match=r"slurm\.controller_port: 20001 is also a slurmd"):
        check_supported(site, features_for(V22), "flat.yaml")


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("slurm-wlm 22.05.8\n", SlurmVersion(22, 5, 8)),
        ("slurm 24.11.5", SlurmVersion(24, 11, 5)),
        ("slurm 23.11.0-0rc1", SlurmVersion(23, 11, 0)),
        ("slurm 25.05", SlurmVersion(25, 5, 0)),
    ],
)
def test_version_parsing(text: str, expected: SlurmVersion) -> None:
    assert SlurmVersion.parse(text) == expected


def test_version_parsing_rejects_garbage() -> None:
    with pytest.raises(TopologyInputError, match="'slurmd: command not found' is not allowed"):
        SlurmVersion.parse("slurmd: command not found")


@pytest.mark.parametrize(
    ("version", "block"),
    [(V22, False), (SlurmVersion(23, 2, 7), False), (SlurmVersion(23, 11, 0), True), (V24, True)],
)
def test_block_topology_feature_boundary(version: SlurmVersion, block: bool) -> None:
    features = features_for(version)
    assert features.block_topology is block
    assert ("block" in features.topology_plugins) is block
