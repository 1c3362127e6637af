"""Jobs on the real embedded Slurm cluster: sbatch --test-only of rendered scripts, submit ->
status -> logs -> cancel round trips, literal carriage of hostile values, signal ->
checkpoint -> requeue, the Slurm client's node controls and batched polling.
"""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from launcher.sbatch_render import Placement, render_script
from launcher.slurm import CliSlurmClient, CommandRunner, make_client
from tests.embedded_cluster import EmbeddedCluster
from tests.unit.test_jobs_render import NASTY, VARIANTS

REPO = Path(__file__).resolve().parent.parent.parent


def gantry(cluster: EmbeddedCluster, cwd: Path, *args: str,
           timeout: float = 120) -> subprocess.CompletedProcess[str]:
    env = {**cluster.env, "GANTRY_JOBS_DIR": str(cwd / "jobs")}
    return subprocess.run([sys.executable, "-m", "launcher", *args], capture_output=True,
                          text=True, cwd=cwd, env=env, timeout=timeout, check=False)


def job_file(tmp_path: Path, extra: str = "", name: str = "itest") -> Path:
    path = tmp_path / f"{name}.yaml"
    path.write_text(f"name: {name}\nmodel: {{n_layer: 2, n_head: 2, n_embd: 8}}\n"
                    "parallelism: {pp: 2, dp: 1}\n"
                    "resources: {nodes: 2, spares: 1, time_limit: '00:05:00'}\n"
                    "policy: {preflight_level: 'off'}\n" + extra)
    return path


def submit(cluster: EmbeddedCluster, tmp_path: Path, job: Path, *args: str) -> dict[str, Any]:
    result = gantry(cluster, tmp_path, "submit", str(job), "--site", str(cluster.site_path),
                    "--json", *args)
    assert result.returncode == 0, result.stderr
    data: dict[str, Any] = json.loads(result.stdout)
    return data


def status(cluster: EmbeddedCluster, tmp_path: Path, job_id: str) -> dict[str, Any]:
    result = gantry(cluster, tmp_path, "status", job_id, "--json")
    assert result.returncode == 0, result.stderr
    data: dict[str, Any] = json.loads(result.stdout)
    return data


def wait_for(check: Callable[[], dict[str, Any] | None], what: str,
             timeout: float = 90) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = check()
        if found is not None:
            return found
        time.sleep(0.5)
    raise AssertionError(f"timed out waiting for {what}")


def wait_state(cluster: EmbeddedCluster, tmp_path: Path, job_id: str,
               states: set[str], timeout: float = 90) -> dict[str, Any]:
    return wait_for(lambda: (lambda s: s if s["state"] in states else None)(
        status(cluster, tmp_path, job_id)), f"job {job_id} in {states}", timeout)


@pytest.fixture
def cluster(embedded_cluster: EmbeddedCluster) -> Any:
    yield embedded_cluster
    embedded_cluster.cancel_all()


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_rendered_scripts_pass_sbatch_test_only(cluster: EmbeddedCluster, tmp_path: Path,
                                                variant: str) -> None:
    inputs = dataclasses.replace(
        VARIANTS[variant], partition=cluster.partition, account=None, qos=None,
        gpus_per_node=0, cpus_per_task=None,
        ranks_per_node=min(VARIANTS[variant].ranks_per_node, 2),
        dependencies=(), job_dir=str(tmp_path / "jd"), submit_dir=str(tmp_path),
        placement=Placement(sbatch_options=("--nodelist=n[1-2]", "--switches=1"))
        if VARIANTS[variant].placement.sbatch_options else Placement())
    script = tmp_path / "job.sbatch"
    script.write_text(render_script(inputs))
    result = cluster.run("sbatch", "--test-only", str(script), check=False)
    assert result.returncode == 0, result.stderr
    assert "to start at" in result.stderr


def test_submit_test_only_example(cluster: EmbeddedCluster, tmp_path: Path) -> None:
    result = gantry(cluster, tmp_path, "submit", str(REPO / "examples/gpt2-tiny-pp2-dp2.yaml"),
                    "--site", str(cluster.site_path), "--test-only")
    assert result.returncode == 0, result.stderr
    assert "to start at" in result.stdout and "n[" in result.stdout
    assert not (tmp_path / "jobs").exists()


def test_submit_follow_completes(cluster: EmbeddedCluster, tmp_path: Path) -> None:
    job = job_file(tmp_path)
    result = gantry(cluster, tmp_path, "submit", str(job), "--site", str(cluster.site_path),
                    "--follow", "--", "bash", "-c", "echo rank $SLURM_PROCID of $SLURM_NTASKS")
    assert result.returncode == 0, result.stderr
    assert "rank 0 of 2" in result.stdout and "rank 1 of 2" in result.stdout
    assert "training finished" in result.stdout
    job_id = result.stdout.split()[2]
    info = status(cluster, tmp_path, job_id)
    assert info["state"] == "COMPLETED" and info["exit_code"] == 0
    job_dir = Path(info["job_dir"])
    for name in ("job.sbatch", "spec.yaml", "request.json", "placement.json", "meta.json"):
        assert (job_dir / name).is_file(), name
    assert (tmp_path / "jobs" / "by-id" / job_id).resolve() == job_dir
    assert (job_dir / "runs" / f"{job_id}-0" / "launch_nodes").read_text().count(",") == 1


def test_submit_status_logs_cancel(cluster: EmbeddedCluster, tmp_path: Path) -> None:
    job = job_file(tmp_path, name="roundtrip")
    job_id = submit(cluster, tmp_path, job, "--", "bash", "-c",
                    "echo started $SLURM_PROCID; sleep 120")["job_id"]
    wait_state(cluster, tmp_path, job_id, {"RUNNING"})
    wait_for(lambda: {} if gantry(cluster, tmp_path, "logs", job_id).stdout.count("started") == 2
             else None, "both ranks' output")
    listing = gantry(cluster, tmp_path, "status")
    assert listing.returncode == 0 and job_id in listing.stdout and "RUNNING" in listing.stdout
    by_name = status(cluster, tmp_path, "roundtrip")
    assert by_name["job_id"] == job_id
    cancelled = gantry(cluster, tmp_path, "cancel", job_id)
    assert cancelled.returncode == 0 and f"cancelled job {job_id}" in cancelled.stdout
    final = wait_state(cluster, tmp_path, job_id, {"CANCELLED"})
    assert final["source"] == "slurm" and final["terminal"] and final["restarts"] == 0
    follow = gantry(cluster, tmp_path, "logs", job_id, "-f", timeout=30)
    assert follow.returncode == 0 and follow.stdout.count("started") == 2


def test_failed_step_exit_code(cluster: EmbeddedCluster, tmp_path: Path) -> None:
    job_id = submit(cluster, tmp_path, job_file(tmp_path, name="fails"), "--", "false")["job_id"]
    info = wait_state(cluster, tmp_path, job_id, {"FAILED", "COMPLETED"})
    assert (info["state"], info["exit_code"]) == ("FAILED", 65)
    log = gantry(cluster, tmp_path, "logs", job_id).stdout
    assert "training step failed with exit code 1" in log


PROBE = ("import json, os, sys; json.dump({'env': {k: v for k, v in os.environ.items() "
         "if k.startswith('NASTY_')}, 'argv': sys.argv[1:]}, open(os.path.join("
         "os.environ['GANTRY_ATTEMPT_DIR'], 'probe-' + os.environ['SLURM_PROCID'] + '.json'), "
         "'w'))")


def test_hostile_values_are_carried_literally(cluster: EmbeddedCluster, tmp_path: Path) -> None:
    canary = tmp_path / "CANARY"
    values = [v.replace("/tmp/CANARY", str(canary)) for v in NASTY]
    yaml_env = "".join(f"  NASTY_Y{i}: {json.dumps(v)}\n" for i, v in enumerate(values))
    job = job_file(tmp_path, "env:\n" + yaml_env, name="hostile")
    flags = [f"--env=NASTY_C{i}={v}" for i, v in enumerate(values)]
    job_id = submit(cluster, tmp_path, job, *flags, "--", sys.executable, "-c", PROBE,
                    *values)["job_id"]
    info = wait_state(cluster, tmp_path, job_id, {"COMPLETED", "FAILED"})
    assert info["state"] == "COMPLETED", gantry(cluster, tmp_path, "logs", job_id).stdout
    attempt = Path(info["job_dir"]) / "runs" / f"{job_id}-0"
    expected_env = {**{f"NASTY_Y{i}": v for i, v in enumerate(values)},
                    **{f"NASTY_C{i}": v for i, v in enumerate(values)}}
    for rank in (0, 1):
        probe = json.loads((attempt / f"probe-{rank}.json").read_text())
        assert probe["argv"] == values
        assert probe["env"] == expected_env
    assert not canary.exists()


CHECKPOINTER = """
out="$GANTRY_JOB_DIR/ckpt-$SLURM_PROCID"
if [ "${SLURM_RESTART_COUNT:-0}" = 0 ]; then
  trap 'echo "checkpoint restart=0" >> "$out"; exit 0' USR1
  echo "waiting $SLURM_PROCID"
  for i in $(seq 900); do sleep 0.2; done
  exit 1
fi
echo "resumed restart=$SLURM_RESTART_COUNT" >> "$out"
"""


def test_usr1_checkpoints_then_requeues(cluster: EmbeddedCluster, tmp_path: Path) -> None:
    job = job_file(tmp_path, name="requeue")
    job_id = submit(cluster, tmp_path, job, "--", "bash", "-c", CHECKPOINTER)["job_id"]
    wait_state(cluster, tmp_path, job_id, {"RUNNING"})
    wait_for(lambda: {} if gantry(cluster, tmp_path, "logs", job_id).stdout.count("waiting") == 2
             else None, "ranks waiting for USR1")
    sent = gantry(cluster, tmp_path, "cancel", job_id, "--signal", "USR1")
    assert sent.returncode == 0, sent.stderr
    requeued = wait_for(lambda: (lambda s: s if s["restarts"] == 1 else None)(
        status(cluster, tmp_path, job_id)), "the requeue")
    job_dir = Path(requeued["job_dir"])
    for rank in (0, 1):
        assert (job_dir / f"ckpt-{rank}").read_text() == "checkpoint restart=0\n"
    cluster.release_requeued(job_id)
    done = wait_state(cluster, tmp_path, job_id, {"COMPLETED", "FAILED"})
    assert done["state"] == "COMPLETED" and done["restarts"] == 1
    for rank in (0, 1):
        assert (job_dir / f"ckpt-{rank}").read_text().splitlines() == [
            "checkpoint restart=0", "resumed restart=1"]
    log = gantry(cluster, tmp_path, "logs", job_id).stdout
    assert "requeueing after SIGUSR1 (restart 1 of 3)" in log


def test_usr1_without_requeue_stops(cluster: EmbeddedCluster, tmp_path: Path) -> None:
    job = job_file(tmp_path, "", name="norequeue")
    text = job.read_text().replace("policy: {preflight_level: 'off'}",
                                   "policy: {preflight_level: 'off', requeue: false}")
    job.write_text(text)
    job_id = submit(cluster, tmp_path, job, "--", "bash", "-c", CHECKPOINTER)["job_id"]
    wait_for(lambda: {} if gantry(cluster, tmp_path, "logs", job_id).stdout.count("waiting") == 2
             else None, "ranks waiting for USR1")
    assert gantry(cluster, tmp_path, "cancel", job_id, "--signal", "USR1").returncode == 0
    info = wait_state(cluster, tmp_path, job_id, {"FAILED", "COMPLETED"})
    assert (info["state"], info["exit_code"], info["restarts"]) == ("FAILED", 67, 0)


def test_client_nodes_drain_resume_and_batched_polling(cluster: EmbeddedCluster) -> None:
    runner = CommandRunner(env=cluster.env)
    client = make_client("auto", runner)
    assert isinstance(client, CliSlurmClient) and client.backend == "cli"
    version = client.version()
    assert version >= (22, 5, 0)
    nodes = {n.name: n for n in client.node_states()}
    assert set(nodes) == set(cluster.nodes)
    target = cluster.nodes[-1]
    client.drain([target], "gantry-test: jobs client drain")
    try:
        node = client.node_states([target])[0]
        assert node.drained and node.reason == "gantry-test: jobs client drain"
    finally:
        client.resume([target])
    assert not client.node_states([target])[0].drained
    ids = [cluster.sbatch("-N1", "--wrap=sleep 30") for _ in range(3)]
    before = len(runner.log)
    states = client.job_states([*ids, "999999"])
    assert set(states) == set(ids)
    assert [r.argv[0].rsplit("/", 1)[-1] for r in runner.log[before:]].count("squeue") == 1
    client.cancel(ids[0])
    deadline = time.monotonic() + 30
    while client.job_info(ids[0]).state != "CANCELLED" and time.monotonic() < deadline:
        time.sleep(0.3)
    assert client.job_info(ids[0]).state == "CANCELLED"
