"""Training survives faults on the real embedded cluster, losing no checkpointed step.

Every test submits the same tiny pp=2 job with `gantry submit` (the generated batch script,
srun --mpi=pmix, `gantry train --resume` on every attempt) with recovery inside the
allocation switched off, so that every failure takes the requeue path
(tests/integration/test_recovery_cluster.py covers the other), injects one fault mid-run, and
checks that the job finishes all its steps with a loss/grad-norm trajectory EXACTLY equal to
the uninterrupted run's, that the restart is counted in `gantry status`, and records the
recovery time (fault -> first step done after the resume) in runs/resilience_recovery.jsonl.

Faults: `scancel --signal=USR1` (checkpoint at an agreed step, requeue); kill -9 of one
node's slurmd, slurmstepd and ranks (Slurm requeues the job, the dead node is not used
again); a rank crashing half-way through a checkpoint write; a corrupted checkpoint shard
(the resume skips it); a rank that stops (SIGSTOP) mid-run (the watchdog aborts the step).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from tests.embedded_cluster import EmbeddedCluster, start_embedded_cluster
from tests.integration.resilience_helpers import (
    STEPS,
    Job,
    fault_marker_time,
    gantry,
    job_body,
    kill_node,
    record_recovery,
    submit,
    uninterrupted_run,
    wait_for,
)

pytestmark = pytest.mark.slow

Trajectory = list[tuple[int, float, float]]


def build_for(cluster: EmbeddedCluster, cwd: Path) -> None:
    result = gantry(cluster, cwd, "build", "--site", str(cluster.site_path), timeout=600)
    assert result.returncode == 0, result.stderr


@pytest.fixture(scope="module")
def cluster(embedded_cluster: EmbeddedCluster,
            tmp_path_factory: pytest.TempPathFactory) -> EmbeddedCluster:
    build_for(embedded_cluster, tmp_path_factory.mktemp("build"))
    return embedded_cluster


@pytest.fixture(autouse=True)
def _empty_queue(request: pytest.FixtureRequest) -> Any:
    yield
    if "cluster" in request.fixturenames:
        request.getfixturevalue("cluster").cancel_all()


@pytest.fixture(scope="module")
def reference(cluster: EmbeddedCluster, tmp_path_factory: pytest.TempPathFactory) -> Trajectory:
    """The uninterrupted run of the test job."""
    job = uninterrupted_run(cluster, tmp_path_factory.mktemp("reference"))
    trajectory = job.trajectory()
    events = job.events()
    assert [e["event"] for e in events if e["event"] != "checkpoint"] == ["start", "end"]
    # interval 2, async: each checkpoint complete after the step that follows it at the latest
    done = [(e["step"], e["completed_after_step"]) for e in events if e["event"] == "checkpoint"]
    assert [step for step, _ in done] == list(range(2, STEPS + 1, 2))
    assert all(step <= after <= step + 1 for step, after in done)
    return trajectory


def full_log(job: Job) -> str:
    return job.log() + gantry(job.cluster, job.cwd, "logs", job.job_id, "--err").stdout


def assert_recovered(job: Job, reference: Trajectory, restarts: int = 1) -> dict[str, Any]:
    info = job.wait_done()
    assert (info["state"], info["restarts"]) == ("COMPLETED", restarts), full_log(job)
    assert job.trajectory() == reference  # bit-exact: loss and grad norm of every step
    starts = [e for e in job.events() if e["event"] == "start"]
    assert len(starts) == restarts + 1 and starts[-1]["resumed"], starts
    return info


def test_scancel_usr1_checkpoints_requeues_and_resumes(cluster: EmbeddedCluster,
                                                       reference: Trajectory,
                                                       tmp_path: Path) -> None:
    job = submit(cluster, tmp_path, job_body("usr1", recover_in_allocation=False,
                                             env={"GANTRY_FAULT_STEP_DELAY_S": "1"}))
    job.wait_step(3)
    sent = time.time()
    cluster.run("scancel", "--signal=USR1", job.job_id)  # to the step's ranks only
    assert_recovered(job, reference)
    stops = [e for e in job.events() if e["event"] == "stop"]
    assert len(stops) == 1 and stops[0]["signal"] == "USR1" and stops[0]["checkpointed"]
    stopped_at = stops[0]["step"]
    assert 3 <= stopped_at < STEPS
    resumed = [e for e in job.events() if e["event"] == "start"][-1]
    assert resumed["step"] == stopped_at  # the signal's checkpoint: no step lost
    log = full_log(job)
    assert "checkpointed and stopped on SIGUSR1" in log
    assert "requeueing after SIGUSR1 (restart 1 of 2)" in log
    record_recovery("scancel --signal=USR1", job, sent)


def test_gantry_cancel_term_checkpoints_and_stops(cluster: EmbeddedCluster,
                                                  tmp_path: Path) -> None:
    """`gantry cancel --signal TERM` (scancel --batch: the script's trap) reaches the ranks as
    TERM, not as srun's kill: they checkpoint at an agreed step and stop, and the job is not
    requeued (a cancel stays final)."""
    job = submit(cluster, tmp_path, job_body("term", recover_in_allocation=False,
                                             env={"GANTRY_FAULT_STEP_DELAY_S": "1"}))
    job.wait_step(3)
    sent = gantry(cluster, job.cwd, "cancel", job.job_id, "--signal", "TERM")
    assert sent.returncode == 0, sent.stderr
    info = job.wait_done()
    log = full_log(job)
    assert (info["restarts"], info["exit_code"]) == (0, 67), log  # STOPPED
    stops = [e for e in job.events() if e["event"] == "stop"]
    assert len(stops) == 1 and stops[0]["signal"] == "TERM" and stops[0]["checkpointed"], log
    assert (job.job_dir / "ckpt" / f"step_{stops[0]['step']:08d}" / "manifest.json").is_file()
    assert "stopped by SIGTERM; not requeueing" in log


def test_a_recorded_stop_request_stops_a_step_that_missed_the_signal(
        cluster: EmbeddedCluster, tmp_path: Path) -> None:
    """The batch script records the signal it got (stop-request) before forwarding it: a step
    that missed the signal itself (srun was still creating it) stops on the record, here
    written with no signal sent at all: an agreed step, checkpointed, exit 67."""
    job = submit(cluster, tmp_path, job_body("request", recover_in_allocation=False,
                                             env={"GANTRY_FAULT_STEP_DELAY_S": "1"}))
    job.wait_step(3)
    (job.job_dir / "runs" / f"{job.job_id}-0" / "stop-request").write_text("TERM\n")
    info = job.wait_done()
    log = full_log(job)
    assert (info["restarts"], info["exit_code"]) == (0, 67), log
    stops = [e for e in job.events() if e["event"] == "stop"]
    assert len(stops) == 1 and stops[0]["signal"] == "TERM" and stops[0]["checkpointed"], log
    assert 3 <= stops[0]["step"] < STEPS
    assert "the training step checkpointed and stopped on SIGTERM" in log


def test_crash_during_checkpoint_write_resumes_from_previous(cluster: EmbeddedCluster,
                                                             reference: Trajectory,
                                                             tmp_path: Path) -> None:
    job = submit(cluster, tmp_path, job_body(
        "crash", recover_in_allocation=False, env={"GANTRY_FAULT_CRASH_IN_CHECKPOINT": "4:1"}))
    assert_recovered(job, reference)
    resumed = [e for e in job.events() if e["event"] == "start"][-1]
    assert resumed["step"] == 2  # checkpoint 4 was never completed
    log = full_log(job)
    assert "crashing in the middle of writing" in log and "stage_001.safetensors.tmp" in log
    assert "requeueing to resume from the last checkpoint" in log
    kept = sorted(p.name for p in (job.job_dir / "ckpt").iterdir())
    assert kept == ["step_00000006", "step_00000008"]  # half-written dir cleaned up
    record_recovery("crash in checkpoint write", job, fault_marker_time(job, "crash-in-checkpoint"))


def test_corrupt_checkpoint_is_skipped_on_resume(cluster: EmbeddedCluster,
                                                 reference: Trajectory,
                                                 tmp_path: Path) -> None:
    job = submit(cluster, tmp_path, job_body("corrupt", recover_in_allocation=False,
                                              env={"GANTRY_FAULT_STEP_DELAY_S": "1"}))
    job.wait_step(5)
    sent = time.time()
    cluster.run("scancel", "--signal=USR1", job.job_id)
    wait_for(lambda: job.status()["restarts"] == 1, "the requeue", 120, job.log)
    stop = next(e for e in job.events() if e["event"] == "stop")
    complete = sorted(int(p.parent.name[5:]) for p in
                      (job.job_dir / "ckpt").glob("step_*/manifest.json"))
    assert complete[-1] == stop["step"] and len(complete) == 2, complete  # keep: 2
    newest = job.job_dir / "ckpt" / f"step_{stop['step']:08d}"
    shard = newest / "stage_001.safetensors"
    data = bytearray(shard.read_bytes())
    data[len(data) // 2] ^= 0xFF  # silent corruption: same size, wrong bytes
    shard.write_bytes(bytes(data))
    assert job.status()["state"] == "PENDING"  # still held back: the resume sees the flip
    assert_recovered(job, reference)
    resumed = [e for e in job.events() if e["event"] == "start"][-1]
    assert resumed["step"] == complete[0]  # the previous complete checkpoint
    log = full_log(job)
    assert f"skipping checkpoint: {shard}: checksum mismatch" in log
    record_recovery("corrupt checkpoint shard (after USR1)", job, sent)


def test_hung_rank_is_aborted_by_the_watchdog(cluster: EmbeddedCluster,
                                              reference: Trajectory,
                                              tmp_path: Path) -> None:
    job = submit(cluster, tmp_path, job_body("hang", recover_in_allocation=False,
                                             env={"GANTRY_FAULT_HANG": "4"},
                                             hang_timeout_s=8))
    assert_recovered(job, reference)
    log = full_log(job)
    assert "rank 1 stops itself before step 4 (SIGSTOP)" in log
    assert "watchdog: rank 0 made no progress for" in log
    assert "training step failed with exit code" in log
    resumed = [e for e in job.events() if e["event"] == "start"][-1]
    assert resumed["step"] == 2
    record_recovery("hung rank (SIGSTOP, watchdog 8 s)", job, fault_marker_time(job, "hang"))


def test_node_killed_mid_run_resumes_on_healthy_nodes(reference: Trajectory,
                                                      tmp_path: Path) -> None:
    # A private cluster (this test breaks a node) that declares a silent node dead after 20 s.
    import yaml

    from launcher.site_config import DEFAULT_SITE

    slurm = {**yaml.safe_load(DEFAULT_SITE.read_text())["slurm"], "slurmd_timeout_s": 20}
    with start_embedded_cluster(overrides={"slurm": slurm}) as private:
        build_for(private, tmp_path)
        job = submit(private, tmp_path, job_body(
            "nodekill", env={"GANTRY_FAULT_STEP_DELAY_S": "1"}, spares=1,
            recover_in_allocation=False))
        job.wait_step(3)
        wait_for(lambda: any((job.job_dir / "ckpt").glob("step_*/manifest.json")),
                 "a complete checkpoint", 120, job.log)
        first = job.launch_nodes(0)
        victim = first[1]  # rank 1's node (not the batch host)
        killed_at = time.time()
        assert kill_node(private, victim, job.job_id), "nothing to kill"
        assert_recovered(job, reference)
        second = job.launch_nodes(1)
        assert victim not in second and len(second) == 2
        state = private.run("sinfo", "-h", "-n", victim, "-o", "%T").stdout.strip()
        assert state.startswith("down"), state
        record_recovery("node killed (slurmd + stepd + ranks, SlurmdTimeout 20 s)", job,
                        killed_at, victim=victim, nodes_before=first, nodes_after=second)
        private.cancel_all()
