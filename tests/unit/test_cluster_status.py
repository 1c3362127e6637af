"""Pure parts of status and the demo job: the switch tree from a site, the plain status
view, `scontrol show job -o` parsing and the generated batch script."""

from __future__ import annotations

import io
import subprocess
from pathlib import Path

import yaml
from rich.console import Console

from launcher.cluster.demo_job import render_allreduce_script
from launcher.cluster.jobs import parse_show_job
from launcher.cluster.status import (
    ClusterStatus,
    DaemonStatus,
    NodeStatus,
    TopologyGroup,
    topology_roots,
)
from launcher.cluster.status_view import show
from launcher.site_config import DEFAULT_SITE, SiteConfig
from launcher.typed_config import from_mapping


def _local() -> SiteConfig:
    return from_mapping(SiteConfig, yaml.safe_load(DEFAULT_SITE.read_text()), "local.yaml")


def _names(group: TopologyGroup) -> list[object]:
    return [group.name, group.nodes, [_names(c) for c in group.children]]


def test_local_switch_tree_has_core_spines_and_leaves() -> None:
    [core] = topology_roots(_local())
    assert _names(core) == [
        "core",
        [],
        [
            ["spine1", [], [["leaf1", ["n1", "n2"], []], ["leaf2", ["n3", "n4"], []]]],
            ["spine2", [], [["leaf3", ["n5", "n6"], []], ["leaf4", ["n7", "n8"], []]]],
        ],
    ]


def test_blocks_and_flat_sites() -> None:
    blocks = from_mapping(
        SiteConfig,
        {
            "name": "b",
            "nodes": {"names": "b[1-4]"},
            "topology": {
                "plugin": "block",
                "blocks": [{"name": "x", "nodes": "b[1-2]"}, {"name": "y", "nodes": "b[3-4]"}],
            },
        },
        "b.yaml",
    )
    assert [_names(g) for g in topology_roots(blocks)] == [
        ["x", ["b1", "b2"], []],
        ["y", ["b3", "b4"], []],
    ]
    flat = from_mapping(SiteConfig, {"name": "f", "nodes": {"names": "f1"}}, "f.yaml")
    assert topology_roots(flat) == []


def test_plain_status_view_is_indented_text() -> None:
    site = _local()
    status = ClusterStatus(
        cluster_name="gantry-local",
        site="local.yaml",
        run_dir="/run/x",
        slurm_conf="/run/x/etc/slurm.conf",
        topology_conf="/run/x/etc/topology.conf",
        slurm_version="22.05.8",
        running=False,
        daemons=[
            DaemonStatus("munged", True, 10, "/run/x/log/munged.out"),
            DaemonStatus("slurmctld", False, None, "/run/x/log/slurmctld.log"),
        ],
        nodes=[
            NodeStatus(f"n{i}", "idle" if i > 1 else "drained", 17000 + i, None)
            for i in range(1, 9)
        ],
        topology_plugin="tree",
        topology=topology_roots(site),
    )
    out = io.StringIO()
    show(status, Console(file=out, force_terminal=False, no_color=True, width=200))
    lines = out.getvalue().splitlines()
    assert lines[0] == "cluster gantry-local: partly up (Slurm 22.05.8); 8 nodes: 1 drained, 7 idle"
    assert "not running: slurmctld (see /run/x/log/slurmctld.log)" in lines
    assert "  core" in lines
    assert "      leaf1" in lines
    assert "        n1 drained" in lines
    assert "\x1b[" not in out.getvalue()


def test_parse_show_job_line() -> None:
    line = (
        "JobId=7 JobName=gantry-demo UserId=root(0) JobState=PENDING Reason=Resources "
        "Dependency=(null) ExitCode=0:0 NodeList=(null) BatchHost=n1"
    )
    fields = parse_show_job(line)
    assert fields["JobState"] == "PENDING"
    assert fields["Reason"] == "Resources"
    assert fields["ExitCode"] == "0:0"


def test_demo_script_quotes_every_value(tmp_path: Path) -> None:
    script = render_allreduce_script(
        python="/opt/my env/bin/python",
        pythonpath="/src/it's here",
        srun_mpi="pmix",
        mpi_env={"OMPI_MCA_btl": "self,tcp", "X": "a b; rm -rf /"},
    )
    assert "export X='a b; rm -rf /'" in script
    assert "srun --mpi=pmix --ntasks-per-node=1 '/opt/my env/bin/python' -m " in script
    path = tmp_path / "job.sbatch"
    path.write_text(script)
    check = subprocess.run(["bash", "-n", str(path)], capture_output=True, text=True)
    assert check.returncode == 0, check.stderr
