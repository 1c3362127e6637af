"""gantry's Slurm plugin suite loaded by the real slurmd/srun/sbatch of an embedded cluster.

Two private clusters (drains stay there), each from a site with `plugins.enabled`, so
`gantry cluster up` builds and installs the suite and its slurm.conf loads it:
- "spank": the SPANK plugin only. Every node's nvidia-smi is the fake printing the H200
  recording (plugins.preflight_env, the door admins use for tool paths); n3's override
  directory holds pending row remaps. `--gantry-preflight` refuses the step on n3 with the
  plugin's message and gantry drains n3 with its own reason; `--gantry-env` puts the site's
  NCCL/MPI tuning into the tasks' environment; a preflight program that closes its output and
  keeps running is killed, with its process group, at the plugin's timeout.
- "scripts": Prolog/Epilog/HealthCheckProgram only, same fault on n2: a job there runs (the
  prolog never fails a job) and leaves n2 drained with gantry's reason.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from launcher.cluster.client import parse_key_values
from tests.embedded_cluster import EmbeddedCluster, start_embedded_cluster
from tests.unit.preflight_helpers import FAKE_DMESG, FAKE_SMI, FAULTS, FIXTURES, HEALTHY

REMAP_REASON = "gantry:gpu.row_remap:gpu1-pending"


def _overrides(tmp: Path, faulty_node: str, plugins: dict[str, Any]) -> dict[str, Any]:
    smi = tmp / "smi"
    shutil.copytree(HEALTHY, smi)
    shutil.copytree(FAULTS / "remap-pending", smi / faulty_node)
    return {
        "nodes": {"names": "n[1-8]", "cpus": 2, "real_memory_mb": 2000,
                  "gpus_per_node": 2, "gpu_model": "NVIDIA H200"},
        "nccl": {"env": {"NCCL_NVLS_ENABLE": "0", "NCCL_DEBUG": "WARN"}},
        "preflight": {"level": "quick", "state_dir": str(tmp / "state"),
                      "max_drain_fraction": 0.5, "resume_after_passes": 2,
                      "disk_paths": [str(tmp)], "thresholds": {"disk_free_gb_min": 0.1}},
        "plugins": {
            "enabled": True,
            "preflight_timeout_s": 90,
            "preflight_env": {
                "GANTRY_NVIDIA_SMI": str(FAKE_SMI),
                "GANTRY_FAKE_SMI_DIR": str(smi),
                "GANTRY_DMESG": str(FAKE_DMESG),
                "GANTRY_FAKE_DMESG_FILE": str(FIXTURES / "dmesg" / "clean.txt"),
            },
            **plugins,
        },
    }


@pytest.fixture(scope="module")
def spank_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedCluster]:
    tmp = tmp_path_factory.mktemp("spank")
    plugins = {"prolog": False, "epilog": False, "health_check": False}
    with start_embedded_cluster(overrides=_overrides(tmp, "n3", plugins)) as cluster:
        yield cluster


def node(c: EmbeddedCluster, name: str) -> tuple[str, str | None]:
    """(State, Reason without Slurm's [user@time] suffix or None) of one node."""
    line = c.run("scontrol", "show", "node", "-o", name).stdout
    fields = parse_key_values(line.split(" Reason=")[0])
    reason = line.split(" Reason=", 1)[1].rsplit(" [", 1)[0].strip() if " Reason=" in line \
        else None
    return fields["State"], reason


def test_slurm_conf_loads_the_suite(spank_cluster: EmbeddedCluster) -> None:
    conf = spank_cluster.slurm_conf.read_text().splitlines()
    plugstack = spank_cluster.run_dir / "plugins" / "etc" / "plugstack.conf"
    assert f"PlugStackConfig={plugstack}" in conf
    assert not any(line.startswith(("Prolog=", "Epilog=", "HealthCheck")) for line in conf)
    assert "required " in plugstack.read_text()


def test_site_check_sees_the_suite_loaded(spank_cluster: EmbeddedCluster) -> None:
    result = subprocess.run([sys.executable, "-m", "launcher", "site", "check", "--site",
                             str(spank_cluster.site_path), "--json"], capture_output=True,
                            text=True, env=spank_cluster.env, timeout=120, check=False)
    checks = {c["id"]: c for c in json.loads(result.stdout)["checks"]}
    assert checks["plugins"]["status"] == "PASS", checks["plugins"]
    assert checks["plugins"]["observed"].endswith("1 slurm.conf settings in effect")
    # nodes.gpus_per_node 2: the embedded cluster gives each node two emulated GPUs
    assert checks["gpus"]["status"] == "PASS", checks["gpus"]
    assert checks["gpus"]["observed"] == "2 GPUs (Gres=) on all 8 nodes"


def test_srun_help_lists_the_options(spank_cluster: EmbeddedCluster) -> None:
    out = spank_cluster.run("srun", "--help").stdout
    assert "--gantry-preflight=quick|standard" in out
    assert "--gantry-env=SITE" in out


@pytest.mark.parametrize(
    ("option", "message"),
    [
        ("--gantry-preflight=deep",
         "gantry: --gantry-preflight=deep is not allowed (expected quick or standard)"),
        ("--gantry-env=../etc/passwd",
         "gantry: --gantry-env=../etc/passwd is not allowed (expected a site name"),
        ("--gantry-env=nosuch", "gantry: --gantry-env=nosuch: no such site (no file "),
    ],
)
def test_bad_option_values_are_refused_before_launch(
    spank_cluster: EmbeddedCluster, option: str, message: str, tmp_path: Path
) -> None:
    marker = tmp_path / "ran"
    result = spank_cluster.run("srun", "-N1", option, "touch", str(marker), check=False)
    assert result.returncode != 0
    assert message in result.stderr, result.stderr
    assert not marker.exists()


def test_preflight_refuses_faulty_node_and_drains_it(spank_cluster: EmbeddedCluster) -> None:
    c = spank_cluster
    try:
        result = c.run("srun", "-N2", "-w", "n[3-4]", "--gantry-preflight",
                       "printenv", "SLURMD_NODENAME", check=False)
        assert result.returncode == 1, result
        assert result.stdout.split() == ["n4"]  # no task ran on n3
        err = result.stderr
        assert "gantry: node n3 failed preflight (quick); the step's tasks do not run there" \
            in err, err
        assert f"gantry: n3: node n3 FAILS preflight: {REMAP_REASON}" in err
        assert "gantry: n3: FAIL gpu.row_remap: GPU1: remap pending=Yes" in err
        assert "gantry: node n4" not in err
        state, reason = node(c, "n3")
        assert "DRAIN" in state and reason == REMAP_REASON
        state4, reason4 = node(c, "n4")
        assert "DRAIN" not in state4 and reason4 is None
        log = (c.run_dir / "log" / "slurmd-n4.log").read_text()
        assert "gantry: preflight (quick) on n4: pass" in log
    finally:
        c.cancel_all()
        c.run("scontrol", "update", "NodeName=n3", "State=RESUME", check=False)


def test_healthy_nodes_run_the_step(spank_cluster: EmbeddedCluster) -> None:
    result = spank_cluster.srun("-N2", "-w", "n[1-2]", "--gantry-preflight=quick",
                                "printenv", "SLURMD_NODENAME")
    assert sorted(result.stdout.split()) == ["n1", "n2"]
    assert "gantry:" not in result.stderr


def test_sbatch_option_gates_the_batch_script(
    spank_cluster: EmbeddedCluster, tmp_path: Path
) -> None:
    c = spank_cluster
    out = tmp_path / "job.out"
    try:
        job = c.sbatch("-N1", "-w", "n3", "--gantry-preflight", f"--output={out}",
                       "--wrap=echo script-ran")
        info = c.wait_job(job)
        assert info.state == "FAILED" and info.exit_code == "1:0", info
        text = out.read_text()
        assert "script-ran" not in text
        assert f"gantry: n3: node n3 FAILS preflight: {REMAP_REASON}" in text
        assert node(c, "n3")[1] == REMAP_REASON
    finally:
        c.cancel_all()
        c.run("scontrol", "update", "NodeName=n3", "State=RESUME", check=False)


def test_gantry_env_reaches_the_tasks_user_values_win(spank_cluster: EmbeddedCluster) -> None:
    c = spank_cluster
    script = "echo $SLURMD_NODENAME $NCCL_NVLS_ENABLE $NCCL_DEBUG $GANTRY_ENV_SITE"
    with_env = c.run("srun", "-N2", "-w", "n[5-6]", "--gantry-env", "sh", "-c", script,
                     env={"NCCL_DEBUG": "INFO"})
    assert sorted(with_env.stdout.splitlines()) == ["n5 0 INFO test", "n6 0 INFO test"]
    named = c.run("srun", "-N1", "-w", "n5", "--gantry-env=test", "sh", "-c", script)
    assert named.stdout.split() == ["n5", "0", "WARN", "test"]
    without = c.run("srun", "-N1", "-w", "n5", "sh", "-c", script)
    assert without.stdout.split() == ["n5"]


def _replace_text(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def test_preflight_watchdog_kills_a_program_that_closed_its_output(
    spank_cluster: EmbeddedCluster, tmp_path: Path
) -> None:
    """The preflight program closes stdout/stderr (the plugin's pipe reads EOF) and keeps
    running with a child; at timeout=2 the plugin kills its process group and refuses the step
    instead of waiting for it."""
    c = spank_cluster
    lock, marker, program = tmp_path / "held", tmp_path / "ran", tmp_path / "hung-gantry"
    # the shell and its sleep share the flock on `held`: it is free once both are gone
    program.write_text(f"#!/bin/sh\nexec 9>{shlex.quote(str(lock))}\nflock 9\n"
                       "exec >&- 2>&-\nsleep 30\n")
    program.chmod(0o755)
    plugstack = c.run_dir / "plugins" / "etc" / "plugstack.conf"
    original = plugstack.read_text()
    hung = re.sub(r" timeout=\d+", " timeout=2",
                  re.sub(r" gantry=\S+", f" gantry={program}", original))
    assert hung.count(f"gantry={program} ") == 1 and " timeout=2 " in hung, hung
    try:
        _replace_text(plugstack, hung)
        # 25 s: above the watchdog's 2 s, below the program's 30 s (an unbounded wait fails)
        result = c.run("srun", "-N1", "-w", "n7", "--gantry-preflight", "touch", str(marker),
                       check=False, timeout=25)
    finally:
        _replace_text(plugstack, original)
        c.cancel_all()
    assert result.returncode == 1, result
    assert "gantry: node n7 failed preflight (quick)" in result.stderr, result.stderr
    assert "gantry: n7: error: gantry preflight did not finish within 2 s (killed)" \
        in result.stderr, result.stderr
    assert not marker.exists()
    subprocess.run(["flock", str(lock), "true"], timeout=20, check=True)  # the group is gone


@pytest.fixture(scope="module")
def scripts_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedCluster]:
    tmp = tmp_path_factory.mktemp("scripts")
    plugins = {"spank": False, "health_check_interval_s": 3600}
    with start_embedded_cluster(overrides=_overrides(tmp, "n2", plugins)) as cluster:
        yield cluster


def test_prolog_drains_faulty_node_with_gantry_reason(
    scripts_cluster: EmbeddedCluster, tmp_path: Path
) -> None:
    c = scripts_cluster
    conf = c.slurm_conf.read_text().splitlines()
    libexec = c.run_dir / "plugins" / "libexec"
    assert f"Prolog={libexec}/gantry-prolog.sh" in conf
    assert f"Epilog={libexec}/gantry-epilog.sh" in conf
    assert f"HealthCheckProgram={libexec}/gantry-healthcheck.sh" in conf
    assert not any(line.startswith("PlugStackConfig=") for line in conf)
    out = tmp_path / "job.out"
    job = c.sbatch("-N2", "-w", "n[1-2]", f"--output={out}", "--wrap=srun hostname")
    info = c.wait_job(job)
    assert info.state == "COMPLETED", (info, out.read_text())
    deadline = time.monotonic() + 60
    while "DRAIN" not in node(c, "n2")[0] and time.monotonic() < deadline:
        time.sleep(0.5)
    state, reason = node(c, "n2")
    assert "DRAIN" in state and reason == REMAP_REASON
    assert "DRAIN" not in node(c, "n1")[0]
