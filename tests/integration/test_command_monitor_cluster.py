"""The run monitor under a command job on the real embedded cluster: a GPU falling off the bus
mid-run on one training node stops the command's step, drains the node and relaunches the
command on the spare, which goes on from the program's own checkpoint.

The command (tests/integration/command_steps.py, 2 nodes + 1 spare; per-rank and torchrun
under srun, per-rank under mpirun) counts steps and keeps its own checkpoint; a fresh start
holds after step HOLD until it is stopped, so the fault lands mid-run without any sleep.
Every node's nvidia-smi, dmesg and sysfs are the tool-path overrides real sites get
(tests/integration/monitor_helpers.py); once every monitor took its first sample and every
rank holds, an Xid 79 line appears in rank 1's node's kernel log. The monitor there asks for
an eviction and `gantry step-watch` has every rank sent TERM (under srun through `scancel
--signal=TERM`, since srun would kill its tasks on a TERM of its own; mpirun passes its TERM
on). `gantry recover` drains the node ``gantry:run:health-xid-79`` and the spare takes its
place; the relaunched ranks resume from step HOLD and finish, and the job completes without
a requeue.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.embedded_cluster import EmbeddedCluster
from tests.integration.monitor_helpers import fault_tools, monitors_started, reasons, xid79
from tests.integration.resilience_helpers import Job, submit, wait_for

pytestmark = pytest.mark.slow

PROGRAM = Path(__file__).resolve().parent / "command_steps.py"
STEPS = 6
HOLD = 3
INTERVAL_S = 0.5


@pytest.fixture(autouse=True)
def _leave_the_cluster_as_found(embedded_cluster: EmbeddedCluster) -> Iterator[None]:
    embedded_cluster.wait_all_idle()  # no node still drained or busy from an earlier test
    yield
    embedded_cluster.cancel_all()
    for node in reasons(embedded_cluster):
        embedded_cluster.run("scontrol", "update", f"NodeName={node}", "State=RESUME",
                             check=False)


def command_job(name: str, mode: str, out: Path, env: dict[str, str]) -> dict[str, Any]:
    return {
        "name": name,
        "resources": {"nodes": 2, "spares": 1, "time_limit": "00:10:00"},
        "policy": {"preflight_level": "off", "max_restarts": 0,
                   "monitor_interval_s": INTERVAL_S},
        "launch": mode,
        "command": [sys.executable, str(PROGRAM), "--dir", str(out), "--steps", str(STEPS),
                    "--hold-after", str(HOLD)],
        "env": {"OMP_NUM_THREADS": "1", **env},
    }


def rank_events(out: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for path in sorted(out.glob("rank*.jsonl"))
            for line in path.read_text().splitlines() if line.strip()]


def holding(out: Path, attempt: str) -> set[int]:
    return {e["rank"] for e in rank_events(out)
            if e["attempt"] == attempt and e["event"] == "hold"}


def mpirun_site(cluster: EmbeddedCluster, tmp_path: Path) -> Path:
    """The embedded cluster's site launching with mpirun."""
    site = yaml.safe_load(cluster.site_path.read_text())
    site["mpi"]["launcher"] = "mpirun"
    site["mpi"]["env"] = {**site["mpi"]["env"], "OMPI_ALLOW_RUN_AS_ROOT": "1",
                          "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1"}
    path = tmp_path / "mpirun-site.yaml"
    path.write_text(yaml.safe_dump(site, sort_keys=False))
    return path


@pytest.mark.parametrize(("mode", "launcher"), [("per-rank", "srun"), ("torchrun", "srun"),
                                                ("per-rank", "mpirun")])
def test_a_gpu_lost_mid_run_relaunches_the_command_on_the_spare(
        embedded_cluster: EmbeddedCluster, tmp_path: Path, mode: str, launcher: str) -> None:
    cluster = embedded_cluster
    out = tmp_path / "progress"
    out.mkdir()
    env = fault_tools(tmp_path, list(cluster.nodes))
    site = mpirun_site(cluster, tmp_path) if launcher == "mpirun" else cluster.site_path
    job: Job = submit(cluster, tmp_path, command_job(f"cmd-monitor-{mode}", mode, out, env),
                      site)
    first = f"{job.job_id}-0"
    wait_for(lambda: (job.job_dir / "runs" / first / "launch_nodes").is_file(),
             "the launch nodes", 120, job.log)
    launch = job.launch_nodes(0)
    allocated = cluster.run("squeue", "-h", "-j", job.job_id, "-o", "%N").stdout.strip()
    [spare] = [n for n in cluster.run("scontrol", "show", "hostnames", allocated).stdout.split()
               if n not in launch]
    # The fault must be news to the monitors (taken after their first sample) and land
    # while every rank is mid-run.
    wait_for(lambda: monitors_started(job, first) == set(launch),
             "a monitor on every launch node", 120, job.log)
    wait_for(lambda: holding(out, first) == {0, 1}, "every rank mid-run", 120, job.log)
    victim = launch[1]
    xid79(tmp_path, victim)

    info = job.wait_done()
    log = job.log()
    err = (job.job_dir / "logs" / f"slurm-{job.job_id}.err").read_text()
    assert (info["state"], info["restarts"]) == ("COMPLETED", 0), (log, err)
    assert "recovery 1 of 3 in this allocation" in log, log
    assert f"gantry step-watch: a node was asked to leave the job ({victim} by the health " \
        "check" in err, err
    # The first launch was stopped mid-run: every rank got the TERM (and could checkpoint).
    events = rank_events(out)
    before = [e for e in events if e["attempt"] == first]
    assert not [e for e in before if e["event"] == "end"], events
    stopped = {(e["rank"], e["node"]) for e in before if e["event"] == "term"}
    assert {rank for rank, _ in stopped} == {0, 1}, events
    assert {node for _, node in stopped} == set(launch), events
    # The relaunch ran on the kept node and the spare, from the program's own checkpoint.
    again = f"{job.job_id}-0.1"
    relaunch = (job.job_dir / "runs" / again / "launch_nodes").read_text().strip().split(",")
    assert sorted(relaunch) == sorted([launch[0], spare]), relaunch
    starts = [e for e in events if e["attempt"] == again and e["event"] == "start"]
    assert sorted((e["node"], e["step"]) for e in starts) == \
        sorted([(launch[0], HOLD), (spare, HOLD)]), events
    ends = [e for e in events if e["attempt"] == again and e["event"] == "end"]
    assert sorted(e["step"] for e in ends) == [STEPS, STEPS], events
    # gantry recover named the node from the eviction and drained it with gantry's reason.
    [line] = [json.loads(x) for x in (job.job_dir / "recoveries.jsonl").read_text().splitlines()]
    assert (line["step_rc"], line["decision"]) == (78, "relaunch"), line
    assert line["culprits"] == {victim: "health-xid-79"}, line
    assert line["evidence"].startswith(f"eviction requested: {victim} by the health check")
    assert line["replaced"] == {victim: spare}, line
    assert reasons(cluster).get(victim) == "gantry:run:health-xid-79"
