"""A failed step is recovered inside its allocation on the real embedded cluster.

Every test submits the resilience tests' tiny pp=2 job (tests/integration/resilience_helpers.py)
with spares in its allocation, injects faults mid-run, and checks that the job keeps its Slurm
job id, finishes all its steps with the uninterrupted run's loss/grad-norm trajectory exactly,
that every culprit node is named in ``recoveries.jsonl``, counted in ``node_faults.json``,
drained with a ``gantry:run:`` reason and never used again by the job, and that an operator's
drain is left alone. Faults: a rank SIGKILLed on a healthy node; a rank stopped (SIGSTOP) so
that its peers' watchdog fires; a second fault after the first recovery; more faults than
spares (then one requeue that excludes both culprits); a whole node killed (slurmd, stepd,
ranks); a job without spares losing a node of its planned switch domain (the requeue leaves
the domain's fence).

The module runs its own cluster (it drains and kills nodes) that declares a silent node dead
after 20 s; drained nodes are resumed after each test.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from launcher.site_config import DEFAULT_SITE
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


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedCluster]:
    slurm = {**yaml.safe_load(DEFAULT_SITE.read_text())["slurm"], "slurmd_timeout_s": 20}
    with start_embedded_cluster(overrides={"slurm": slurm}) as private:
        cwd = tmp_path_factory.mktemp("build")
        built = gantry(private, cwd, "build", "--site", str(private.site_path), timeout=600)
        assert built.returncode == 0, built.stderr
        yield private


def reasons(cluster: EmbeddedCluster) -> dict[str, str]:
    """Node -> its drain reason, for every drained node."""
    shown = cluster.run("sinfo", "-h", "-R", "-N", "-o", "%N|%E").stdout
    return {node: reason for line in shown.splitlines() if "|" in line
            for node, reason in [line.split("|", 1)]}


@pytest.fixture(autouse=True)
def _healthy_nodes(request: pytest.FixtureRequest) -> Iterator[None]:
    yield
    cluster: EmbeddedCluster = request.getfixturevalue("cluster")
    cluster.cancel_all()
    for node, reason in reasons(cluster).items():
        if reason.startswith("gantry:"):
            cluster.run("scontrol", "update", f"NodeName={node}", "State=RESUME")
    # the next test starts on answering nodes (a killed node stays down)
    cluster._wait_nodes(lambda state: state == "idle" or state.startswith("down"), 60,
                        "idle or down")


@pytest.fixture(scope="module")
def reference(cluster: EmbeddedCluster, tmp_path_factory: pytest.TempPathFactory) -> Trajectory:
    return uninterrupted_run(cluster, tmp_path_factory.mktemp("reference")).trajectory()


def attempts(job: Job) -> list[str]:
    from launcher.job_dir import attempt_key

    names = [p.name for p in (job.job_dir / "runs").iterdir() if attempt_key(p.name)]
    return sorted(names, key=lambda n: attempt_key(n) or ())


def nodes_of(job: Job, attempt: str) -> list[str]:
    return (job.job_dir / "runs" / attempt / "launch_nodes").read_text().strip().split(",")


def recoveries(job: Job) -> list[dict[str, Any]]:
    path = job.job_dir / "recoveries.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.is_file() \
        else []


def assert_finished_in_place(job: Job, reference: Trajectory, restarts: int = 0) -> None:
    info = job.wait_done()
    log = job.log()
    assert (info["state"], info["restarts"]) == ("COMPLETED", restarts), log
    assert job.trajectory() == reference, log  # bit-exact: loss and grad norm of every step


def assert_culprits_out(job: Job, cluster: EmbeddedCluster, culprits: list[str],
                        *, drained: bool = True) -> None:
    """Each culprit counted, drained by gantry (unless dead), absent from later attempts."""
    faults = json.loads((job.job_dir / "node_faults.json").read_text())
    assert sorted(faults) == sorted(culprits), faults
    shown = reasons(cluster)
    for node in culprits:
        if drained:
            assert shown.get(node, "").startswith("gantry:run:"), (node, shown)
    names = attempts(job)
    for line in recoveries(job):
        later = names[names.index(line["attempt"]) + 1:]
        for culprit in line["culprits"]:
            assert all(culprit not in nodes_of(job, a) for a in later), (culprit, names)


def test_rank_killed_by_a_signal_is_replaced_by_the_spare(cluster: EmbeddedCluster,
                                                          reference: Trajectory,
                                                          tmp_path: Path) -> None:
    job = submit(cluster, tmp_path, job_body("kill", spares=1,
                                             env={"GANTRY_FAULT_KILL": "4:1"}))
    assert_finished_in_place(job, reference)
    assert attempts(job) == [f"{job.job_id}-0", f"{job.job_id}-0.1"]
    first, second = nodes_of(job, attempts(job)[0]), nodes_of(job, attempts(job)[1])
    victim = first[1]  # rank 1's node
    [line] = recoveries(job)
    assert line["decision"] == "relaunch" and list(line["culprits"]) == [victim], line
    assert line["culprits"][victim] in ("rank1-killed", "rank1-vanished"), line
    assert line["spare_preflight"] == "quick"  # the job's level is off: replacements get quick
    assert second == [first[0], line["replaced"][victim]] and victim not in second
    assert_culprits_out(job, cluster, [victim])
    assert "recovery 1 of 3 in this allocation" in job.log()
    shown = gantry(cluster, tmp_path, "status", job.job_id).stdout
    assert f"recovery   {attempts(job)[0]}: rank1-" in shown, shown
    assert f"relaunched with {line['replaced'][victim]} for {victim}" in shown, shown
    assert job.status()["faulty_nodes"] == {victim: {"count": 1,
                                                     "last": line["culprits"][victim]}}
    made = gantry(cluster, tmp_path, "report", job.job_id, "--json")
    assert made.returncode == 0, made.stderr
    report = json.loads(made.stdout)
    assert report["recoveries"] == job.status()["recoveries"] and len(report["recoveries"]) == 1
    assert report["recoveries"][0] in Path(report["html"]).read_text()
    record_recovery("rank SIGKILLed, in the allocation", job, fault_marker_time(job, "kill"),
                    victim=victim)


def test_hung_rank_is_named_by_its_peers_watchdog(cluster: EmbeddedCluster,
                                                  reference: Trajectory,
                                                  tmp_path: Path) -> None:
    job = submit(cluster, tmp_path, job_body("hang", spares=1, hang_timeout_s=6,
                                             env={"GANTRY_FAULT_HANG": "4:1"}))
    assert_finished_in_place(job, reference)
    first = nodes_of(job, attempts(job)[0])
    [line] = recoveries(job)
    assert line["culprits"] == {first[1]: "rank1-unresponsive"}, line  # not rank 0, who noticed
    hang = json.loads((job.job_dir / "runs" / attempts(job)[0] / "hang.json").read_text())
    assert hang["noticed_by"] == 0 and hang["stalled_ranks"] == [1], hang
    assert_culprits_out(job, cluster, [first[1]])


def test_second_fault_after_the_first_recovery(cluster: EmbeddedCluster,
                                               reference: Trajectory, tmp_path: Path) -> None:
    job = submit(cluster, tmp_path, job_body(
        "twice", spares=2, hang_timeout_s=6,
        env={"GANTRY_FAULT_KILL": "4:1", "GANTRY_FAULT_HANG": "6:0"}))
    assert_finished_in_place(job, reference)
    names = attempts(job)
    assert names == [f"{job.job_id}-0", f"{job.job_id}-0.1", f"{job.job_id}-0.2"], names
    lines = recoveries(job)
    culprits = [next(iter(line["culprits"])) for line in lines]
    assert culprits == [nodes_of(job, names[0])[1], nodes_of(job, names[1])[0]], lines
    assert len(set(nodes_of(job, names[2])) & set(culprits)) == 0
    assert_culprits_out(job, cluster, culprits)


def test_more_faults_than_spares_requeue_excluding_every_culprit(
        cluster: EmbeddedCluster, reference: Trajectory, tmp_path: Path) -> None:
    job = submit(cluster, tmp_path, job_body(
        "nospare", spares=1, hang_timeout_s=6,
        env={"GANTRY_FAULT_KILL": "4:1", "GANTRY_FAULT_HANG": "6:1"}))
    assert_finished_in_place(job, reference, restarts=1)
    names = attempts(job)
    assert names == [f"{job.job_id}-0", f"{job.job_id}-0.1", f"{job.job_id}-1"], names
    lines = recoveries(job)
    assert [line["decision"] for line in lines] == ["relaunch", "requeue"], lines
    culprits = [next(iter(line["culprits"])) for line in lines]
    assert len(set(culprits)) == 2
    assert not set(nodes_of(job, names[2])) & set(culprits)
    assert "requeued by gantry recover" in job.log()
    assert_culprits_out(job, cluster, culprits)


def test_operators_drain_is_never_touched(cluster: EmbeddedCluster, reference: Trajectory,
                                          tmp_path: Path) -> None:
    """The spare an operator drains mid-run is not taken; the fault then requeues."""
    job = submit(cluster, tmp_path, job_body(
        "operator", spares=1, env={"GANTRY_FAULT_KILL": "5:1", "GANTRY_FAULT_STEP_DELAY_S": "1"}))
    job.wait_step(2)
    allocated = job.status()["nodes"]
    from topology import hostlists

    held = hostlists.expand(allocated, "nodes")
    spare = next(n for n in held if n not in nodes_of(job, attempts(job)[0]))
    operator = "PSU swap, jobs moved to NodeName=n1 [alice]"
    cluster.run("scontrol", "update", f"NodeName={spare}", "State=DRAIN", f"Reason={operator}")
    try:
        assert_finished_in_place(job, reference, restarts=1)
        assert reasons(cluster)[spare] == operator
        [line] = recoveries(job)
        assert line["decision"] == "requeue", line
    finally:
        cluster.run("scontrol", "update", f"NodeName={spare}", "State=RESUME")


def test_node_killed_is_replaced_by_the_spare(cluster: EmbeddedCluster, reference: Trajectory,
                                              tmp_path: Path) -> None:
    job = submit(cluster, tmp_path, job_body(
        "nodekill", spares=1, hang_timeout_s=6, env={"GANTRY_FAULT_STEP_DELAY_S": "1"}))
    job.wait_step(3)
    wait_for(lambda: any((job.job_dir / "ckpt").glob("step_*/manifest.json")),
             "a complete checkpoint", 120, job.log)
    first = nodes_of(job, attempts(job)[0])
    victim = first[1]  # rank 1's node (not the batch host)
    killed_at = time.time()
    assert kill_node(cluster, victim, job.job_id), "nothing to kill"
    assert_finished_in_place(job, reference)
    names = attempts(job)
    assert names == [f"{job.job_id}-0", f"{job.job_id}-0.1"], names
    [line] = recoveries(job)
    assert line["culprits"] == {victim: "node-lost"} or \
        line["culprits"] == {victim: "rank1-unresponsive"}, line
    assert victim not in nodes_of(job, names[1])
    assert_culprits_out(job, cluster, [victim], drained=False)
    record_recovery("node killed, in the allocation (SlurmdTimeout 20 s, watchdog 6 s)", job,
                    killed_at, victim=victim)


def test_job_without_spares_leaves_its_fenced_domain_after_a_node_loss(
        cluster: EmbeddedCluster, tmp_path: Path) -> None:
    body = job_body("fenced", env={"GANTRY_FAULT_STEP_DELAY_S": "1"}, hang_timeout_s=6)
    body["parallelism"]["dp"] = 2
    body["resources"]["nodes"] = 4
    job = submit(cluster, tmp_path, body)
    options = json.loads((job.job_dir / "placement.json").read_text())["sbatch_options"]
    fence = [o for o in options if o.startswith("--exclude=")]
    assert fence, options  # the planner fenced the job into one switch domain
    job.wait_step(3)
    wait_for(lambda: any((job.job_dir / "ckpt").glob("step_*/manifest.json")),
             "a complete checkpoint", 120, job.log)
    first = nodes_of(job, attempts(job)[0])
    victim = first[-1]
    assert kill_node(cluster, victim, job.job_id), "nothing to kill"
    info = job.wait_done(360)
    assert (info["state"], info["restarts"]) == ("COMPLETED", 1), job.log()
    assert [r["step"] for r in job.metrics()][-1] == STEPS
    final = nodes_of(job, attempts(job)[-1])
    assert victim not in final and len(final) == 4
    [line] = recoveries(job)
    assert line["decision"] == "requeue", line


def test_a_spare_that_fails_its_preflight_is_passed_over(cluster: EmbeddedCluster,
                                                         tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """recover() against the real Slurm, the spares' preflight replaced by one that fails the
    first spare (the seam a hardware fault comes through): it is rejected, the next spare
    takes the failed node's place."""
    from launcher.preflight.slurm_nodes import Scontrol
    from launcher.recovery.recover import recover
    from launcher.site_config import load_site
    from launcher.train.rank_records import RankRecords

    idle = sorted((n for n, state in cluster.node_states().items() if state == "idle"),
                  key=lambda n: int(n[1:]))
    first, failed, bad_spare, good_spare = idle[:4]
    site = load_site(cluster.site_path)
    monkeypatch.setenv("SLURM_JOB_NODELIST", ",".join(idle[:4]))
    attempt, job_dir = tmp_path / "runs" / "9-0", tmp_path
    for rank, name in enumerate([first, failed]):
        RankRecords(attempt, rank, name).started()
    RankRecords(attempt, 1, failed).ended(77, "crash")
    checked: list[list[str]] = []

    def check(nodes: list[str]) -> list[str]:
        checked.append(list(nodes))
        return [n for n in nodes if n != bad_spare]

    scontrol = Scontrol(env=cluster.env)
    outcome = recover(site, job_dir, attempt, [first, failed], None, check, scontrol=scontrol)
    assert outcome.decision == "relaunch" and outcome.nodes == [first, good_spare], outcome
    assert outcome.rejected == [bad_spare] and outcome.replaced == [(failed, good_spare)]
    assert checked == [[bad_spare], [good_spare]]  # only replacements, one place at a time
    assert reasons(cluster)[failed] == "gantry:run:rank1-exit77"


def test_a_requeue_whose_exclusion_fails_still_releases_the_job(
        cluster: EmbeddedCluster) -> None:
    from launcher.preflight.slurm_nodes import Scontrol

    job_id = cluster.sbatch("-N", "1", "--requeue", script="#!/bin/sh\nsleep 300\n")
    wait_for(lambda: cluster.job(job_id).state == "RUNNING", "the job to run", 60)
    steps = Scontrol(env=cluster.env).requeue_excluding(job_id, "nosuchnode9")
    assert steps == ["requeuehold", "ExcNodeList=nosuchnode9 (failed)", "release"], steps
    shown = cluster.run("scontrol", "show", "job", job_id).stdout
    assert "JobHeldUser" not in shown and "Priority=0 " not in shown, shown
