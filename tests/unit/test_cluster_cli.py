"""`gantry cluster` bad input through the real CLI: one `error:` line naming the file,
field and value, exit 2, and nothing started or written (the run dir is never created)."""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from launcher.cluster.ports import find_free_port_block
from launcher.cluster.versions import detect_version, features_for
from launcher.site_config import DEFAULT_SITE


@pytest.fixture
def workdir() -> Iterator[Path]:
    """A temp dir munged could reach (pytest's tmp_path sits under a 0700 dir)."""
    path = Path(tempfile.mkdtemp(prefix="gantry-cli-test-"))
    path.chmod(0o755)
    yield path
    shutil.rmtree(path, ignore_errors=True)


def run_gantry(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "launcher", *args], capture_output=True, text=True, check=False
    )


def write_site(directory: Path, edit: dict[str, Any], port_base: int = 0) -> Path:
    """local.yaml with its own run dir and ports, then ``edit`` (dotted keys) applied."""
    data = yaml.safe_load(DEFAULT_SITE.read_text())
    data["slurm"]["run_dir"] = str(directory / "run")
    if port_base:
        data["slurm"]["controller_port"] = port_base
        data["slurm"]["slurmd_port_base"] = port_base + 1
    for dotted, value in edit.items():
        *parents, last = dotted.split(".")
        target = data
        for key in parents:
            target = target[key]
        target[last] = value
    path = directory / "site.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def assert_one_line_error(result: subprocess.CompletedProcess[str], *fragments: str) -> str:
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    line = lines[0]
    assert line.startswith("error: ")
    for fragment in fragments:
        assert fragment in line, line
    return line


@pytest.mark.parametrize(
    ("edit", "fragments"),
    [
        ({"slurm.colour": "red"}, ("slurm.colour: unknown key", "allowed here:")),
        ({"nodes.cpus": "two"}, ("nodes.cpus: 'two' is not allowed", "expected an integer")),
        ({"nodes.names": ""}, ("nodes.names: '' names 0 nodes", "expected at least 1")),
        ({"slurm.controller_port": 0}, ("slurm.controller_port: 0 is not allowed",)),
        ({"mpi.env": {"BAD NAME": "1"}}, ("mpi.env: 'BAD NAME' is not allowed",)),
        ({"slurm.embedded": False}, ("slurm.embedded: false",)),
        (
            {"topology.plugin": "block", "topology.blocks": [{"name": "b1", "nodes": "n[1-8]"}]},
            ("topology.plugin: 'block' is not supported", "23.11"),
        ),
    ],
)
def test_bad_site_is_one_line_exit_2_and_starts_nothing(
    workdir: Path, edit: dict[str, Any], fragments: tuple[str, ...]
) -> None:
    site = write_site(workdir, edit, port_base=find_free_port_block(9, start=33000))
    block = edit.get("topology.plugin") == "block"
    if block and features_for(detect_version()).block_topology:
        pytest.skip("this Slurm supports topology/block; covered by the render tests")
    line = assert_one_line_error(run_gantry("cluster", "up", "--site", str(site)), *fragments)
    assert str(site) in line
    assert not (workdir / "run").exists(), "bad input must not create the run dir"


def test_port_in_use_is_bad_input_and_starts_nothing(workdir: Path) -> None:
    base = find_free_port_block(9, start=34000)
    with socket.socket() as squatter:
        squatter.bind(("0.0.0.0", base + 3))  # the slurmd port of n3
        squatter.listen()
        site = write_site(workdir, {}, port_base=base)
        line = assert_one_line_error(
            run_gantry("cluster", "up", "--site", str(site)),
            "slurm.slurmd_port_base",
            f"port {base + 3} (slurmd of node n3) is already in use",
        )
    assert str(site) in line
    assert not (workdir / "run").exists()


def test_controller_port_in_use_names_controller_port(workdir: Path) -> None:
    base = find_free_port_block(9, start=35000)
    with socket.socket() as squatter:
        squatter.bind(("0.0.0.0", base))
        squatter.listen()
        site = write_site(workdir, {}, port_base=base)
        assert_one_line_error(
            run_gantry("cluster", "up", "--site", str(site)),
            f"slurm.controller_port: port {base} (slurmctld) is already in use",
        )
    assert not (workdir / "run").exists()


def test_missing_site_file_is_bad_input(workdir: Path) -> None:
    assert_one_line_error(
        run_gantry("cluster", "status", "--site", str(workdir / "nope.yaml")), "no such file"
    )


def test_bad_timeout_is_bad_input(workdir: Path) -> None:
    site = write_site(workdir, {})
    assert_one_line_error(
        run_gantry("cluster", "up", "--site", str(site), "--timeout", "0"), "--timeout: 0"
    )
    assert not (workdir / "run").exists()


def test_status_and_down_of_a_stopped_cluster(workdir: Path) -> None:
    site = write_site(workdir, {})
    status = run_gantry("cluster", "status", "--site", str(site), "--json")
    assert status.returncode == 0, status.stderr
    data = json.loads(status.stdout)
    assert data["running"] is False
    assert {n["state"] for n in data["nodes"]} == {"stopped"}
    assert data["slurm_conf"] == str(workdir / "run" / "etc" / "slurm.conf")
    down = run_gantry("cluster", "down", "--site", str(site))
    assert down.returncode == 0
    assert "was not running" in down.stdout


def test_env_prints_slurm_conf_and_mpi_env(workdir: Path) -> None:
    site = write_site(workdir, {"mpi.env": {"OMPI_MCA_btl": "self,tcp", "X_Y": "a b"}})
    result = run_gantry("cluster", "env", "--site", str(site))
    assert result.returncode == 0
    lines = result.stdout.splitlines()
    assert lines[0] == f"export SLURM_CONF={workdir / 'run' / 'etc' / 'slurm.conf'}"
    assert "export OMPI_MCA_btl=self,tcp" in lines
    assert "export X_Y='a b'" in lines


def test_cluster_without_action_prints_help_exit_2() -> None:
    result = run_gantry("cluster")
    assert result.returncode == 2
    assert "up" in result.stdout and "status" in result.stdout


def test_run_dir_munge_cannot_reach_is_bad_input(workdir: Path) -> None:
    private = workdir / "private"
    private.mkdir(mode=0o700)
    site = write_site(workdir, {"slurm.run_dir": str(private / "run")})
    assert_one_line_error(
        run_gantry("cluster", "up", "--site", str(site)),
        "slurm.run_dir:",
        f"cannot enter {private} (mode 700)",
    )
    assert not (private / "run").exists()
