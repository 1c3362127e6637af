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
        ({"preflight.xid_fail_codes": [48, 79]}, "preflight.xid_fail_codes: no longer a "
         "setting: use xid_actions, a map of Xid code -> drain, reset, warn or ignore"),
        ({"nodes.cpus": "many"}, "nodes.cpus: 'many' is not allowed (expected an integer)"),
        ({"nodes.names": ""}, "nodes.names: '' names 0 nodes"),
        ({"slurm.controller_port": 70000}, "slurm.controller_port: 70000 is not allowed"),
        ({"build.backend": "rocm"}, "build.backend: 'rocm' is not allowed"),
        ({"topology.plugin": "tree", "topology.switches": []}, "topology.switches: plugin"),
        ({"slurm.partition": "a b"}, "slurm.partition: 'a b' is not allowed (expected one Slurm "
         "partition name without blanks, ',', '=', '#', quotes or backslashes)"),
        ({"slurm.partition": "debug,batch"}, "slurm.partition: 'debug,batch' is not allowed"),
        ({"slurm.partition": ""}, "slurm.partition: '' is not allowed"),
        ({"slurm.cluster_name": "a=b"}, "slurm.cluster_name: 'a=b' is not allowed"),
        ({"nodes.names": "n[1-3"}, "nodes.names: bad hostlist 'n[1-3' (unbalanced brackets)"),
        ({"nodes.names": "n[1-2]\nn3"}, "nodes.names: bad hostlist 'n[1-2]\\nn3' (expected "
         "host names without blanks or control characters)"),
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


def refused(tmp_path: Path, data: dict[str, object]) -> tuple[Path, str]:
    """Write ``data`` as a site file; the one-line error loading it gives."""
    path = tmp_path / "site.yaml"
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(UserInputError) as info:
        load_site(path)
    return path, str(info.value)


@pytest.mark.parametrize(
    ("where", "value", "message"),
    [
        ("switches", "leaf=1", "topology.switches[0].name: 'leaf=1' is not allowed (expected one "
         "switch name without blanks"),
        ("switches", "leaf 1", "topology.switches[0].name: 'leaf 1' is not allowed"),
        ("switches", "#leaf", "topology.switches[0].name: '#leaf' is not allowed"),
        ("blocks", "b,1", "topology.blocks[0].name: 'b,1' is not allowed (expected one block "
         "name without blanks"),
    ],
)
def test_switch_and_block_names_are_one_slurm_word(
    tmp_path: Path, where: str, value: str, message: str
) -> None:
    data = yaml.safe_load(DEFAULT_SITE.read_text())
    if where == "blocks":
        data["topology"] = {"plugin": "block", "blocks": [{"name": value, "nodes": "n[1-4]"}]}
    else:
        data["topology"]["switches"][0]["name"] = value
    path, error = refused(tmp_path, data)
    assert error.startswith(f"{path}: {message}")


def test_a_bad_hostlist_in_a_switch_names_the_file(tmp_path: Path) -> None:
    data = yaml.safe_load(DEFAULT_SITE.read_text())
    data["topology"]["switches"][0]["nodes"] = "n[2-1]"
    path, error = refused(tmp_path, data)
    assert error.startswith(f"{path}: topology.switches[0].nodes: bad hostlist 'n[2-1]'")


def test_a_site_key_written_twice_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "site.yaml"
    text = DEFAULT_SITE.read_text()
    path.write_text(text.replace("slurm:\n", "slurm:\n  partition: other\n", 1))
    assert "partition: other" in path.read_text()
    with pytest.raises(UserInputError, match=r"site\.yaml:\d+: key 'partition' appears twice"):
        load_site(path)


def test_a_block_defined_twice_is_refused(tmp_path: Path) -> None:
    data = yaml.safe_load(DEFAULT_SITE.read_text())
    data["topology"] = {"plugin": "block", "blocks": [{"name": "b1", "nodes": "n[1-4]"},
                                                      {"name": "b1", "nodes": "n[5-8]"}]}
    path, error = refused(tmp_path, data)
    assert error == f"{path}: topology.blocks[1].name: 'b1' is defined twice"


def test_errors_about_a_long_node_list_stay_short(tmp_path: Path) -> None:
    data = yaml.safe_load(DEFAULT_SITE.read_text())
    names = [f"node{i:05d}" for i in range(3000)]
    data["nodes"]["names"] = ",".join([*names, "node00007"])
    path, error = refused(tmp_path, data)
    assert error.endswith("characters) lists node 'node00007' twice"), error
    assert len(error) < 200 + len(str(path))
    data["nodes"]["names"] = ",".join(names)
    data["topology"]["switches"][0]["nodes"] = "zz"
    path, error = refused(tmp_path, data)
    assert "'zz' is not one of nodes.names ('node00000,node00001," in error
    assert len(error) < 250 + len(str(path))


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("local\n#define X 1", "name: 'local\\n#define X 1' is not allowed (expected one site "
         "name without blanks, ',', '=', '#', quotes or backslashes)"),
        ('a"b', "name: 'a\"b' is not allowed (expected one site name without blanks"),
        ("a'b", "name: \"a'b\" is not allowed (expected one site name without blanks"),
        ("a\\b", "name: 'a\\\\b' is not allowed (expected one site name"),
        ("../x", "name: '../x' is not allowed (expected at most 64 characters, no '/', not "
         "starting with '.': the name is a directory of the build cache)"),
        ("x/../../y", "name: 'x/../../y' is not allowed (expected at most 64 characters, no '/'"),
        ("..", "name: '..' is not allowed (expected at most 64 characters"),
        (".hidden", "name: '.hidden' is not allowed (expected at most 64 characters"),
        ("s" * 65, f"name: '{'s' * 65}' is not allowed (expected at most 64 characters"),
        ("", "name: '' is not allowed (expected one site name"),
    ],
)
def test_the_site_name_is_one_word_that_can_name_a_directory(
    tmp_path: Path, name: str, message: str
) -> None:
    data = yaml.safe_load(DEFAULT_SITE.read_text())
    data["name"] = name
    path, error = refused(tmp_path, data)
    assert error.startswith(f"{path}: name: "), error
    assert message in error, error
    assert "\n" not in error


@pytest.mark.parametrize("name", ["local", "dc1-h200.prod", "site_2", "s" * 64, "a@b+c:d"])
def test_site_names_that_are_one_word_load(tmp_path: Path, name: str) -> None:
    data = yaml.safe_load(DEFAULT_SITE.read_text())
    data["name"] = name
    path = tmp_path / "site.yaml"
    path.write_text(yaml.safe_dump(data))
    assert load_site(path).config.name == name
