"""Tests for loading and validating site configs."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from launcher.errors import UserInputError
from launcher.site_config import DEFAULT_SITE, load_site


def test_local_site_loads() -> None:
    site = load_site(DEFAULT_SITE).config
    assert site.slurm.embedded
    assert site.nodes.node_list() == [f"n{i}" for i in range(1, 9)]
    assert site.topology.plugin == "tree"
    assert {s.name for s in site.topology.switches} >= {"core", "leaf1"}


def _write_variant(tmp_path: Path, edit: dict[str, object]) -> Path:
    data = yaml.safe_load(DEFAULT_SITE.read_text())
    for dotted, value in edit.items():
        *parents, last = dotted.split(".")
        target = data
        for key in parents:
            target = target[key]
        target[last] = value
    path = tmp_path / "site.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        ({"slurm.colour": "red"}, "slurm.colour: unknown key"),
        ({"nodes.cpus": "many"}, "nodes.cpus: 'many' is not allowed (expected an integer)"),
        ({"nodes.names": ""}, "nodes.names: '' names 0 nodes"),
        ({"slurm.controller_port": 70000}, "slurm.controller_port: 70000 is not allowed"),
        ({"build.backend": "rocm"}, "build.backend: 'rocm' is not allowed"),
        ({"topology.plugin": "tree", "topology.switches": []}, "topology.switches: plugin"),
    ],
)
def test_bad_site_names_field(tmp_path: Path, edit: dict[str, object], message: str) -> None:
    path = _write_variant(tmp_path, edit)
    with pytest.raises(UserInputError) as info:
        load_site(path)
    assert str(info.value).startswith(str(path))
    assert message in str(info.value)


def test_switch_naming_unknown_node_is_rejected(tmp_path: Path) -> None:
    data = yaml.safe_load(DEFAULT_SITE.read_text())
    data["topology"]["switches"][0]["nodes"] = "n[1-2],x9"
    path = tmp_path / "site.yaml"
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(UserInputError, match=r"topology\.switches\[0\]\.nodes: 'x9' is not one"):
        load_site(path)
