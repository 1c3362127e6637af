"""The preflight gate on the real embedded Slurm cluster, with faults injected per node.

Every node's `nvidia-smi` is the fake script printing the real H200 recording; the
per-node override directory (picked by $SLURMD_NODENAME) injects one fault on one node:
- a job on n[1-5] needing 2 nodes, planned on n1,n3 with spares n4,n5 (its placement.json):
  n3 reports pending row remaps, n4 an inactive NVLink and is drained by an "operator" while
  the job waits. The gate keeps planned n1, puts spare n5 in n3's place (not n2, the first
  healthy node in allocation order; not n4, a failed spare), drains n3 with gantry's reason
  and leaves n4's operator reason alone.
- a job that cannot spare its bad node is requeued excluding it and then runs elsewhere.
- the generated HealthCheckProgram resumes gantry's drain after K clean passes only.
"""

from __future__ import annotations

import json
import shlex
import shutil
import sys
from pathlib import Path

import pytest
import yaml

from launcher.preflight.slurm_nodes import parse_nodes_json
from tests.embedded_cluster import EmbeddedCluster
from tests.unit.preflight_helpers import FAKE_DMESG, FAKE_SMI, FAULTS, FIXTURES, HEALTHY

OPERATOR_REASON = "operator: fan replaced, burn-in pending"


def gpu_site(c: EmbeddedCluster, tmp: Path) -> Path:
    """The cluster's site with 2 x H200 per node expected and a private state dir."""
    data = yaml.safe_load(c.site_path.read_text())
    data["nodes"]["gpus_per_node"] = 2
    data["nodes"]["gpu_model"] = "NVIDIA H200"
    data["preflight"] = {
        "level": "quick",
        "state_dir": str(tmp / "state"),
        "resume_after_passes": 2,
        "max_drain_fraction": 0.5,
        "disk_paths": [str(tmp)],
        "thresholds": {"disk_free_gb_min": 0.1},
    }
    path = tmp / "gpu-site.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def fault_env(tmp: Path, faults: dict[str, str]) -> dict[str, str]:
    smi = tmp / "smi"
    shutil.copytree(HEALTHY, smi, dirs_exist_ok=True)
    for node, fault in faults.items():
        shutil.copytree(FAULTS / fault, smi / node, dirs_exist_ok=True)
    return {
        "GANTRY_NVIDIA_SMI": str(FAKE_SMI),
        "GANTRY_FAKE_SMI_DIR": str(smi),
        "GANTRY_DMESG": str(FAKE_DMESG),
        "GANTRY_FAKE_DMESG_FILE": str(FIXTURES / "dmesg" / "clean.txt"),
    }


def gate_script(site: Path, out: Path, extra: str, wait_for: Path | None = None) -> str:
    q = shlex.quote
    wait = ""
    if wait_for is not None:
        wait = f"for i in $(seq 300); do [ -e {q(str(wait_for))} ] && break; sleep 0.2; done\n"
    return (
        "#!/bin/sh\n"
        + wait
        + f"{q(sys.executable)} -m launcher gate --site {q(str(site))} {extra} --json "
        f"--nodelist-out {q(str(out))}.nodes > {q(str(out))}.json\n"
        "rc=$?\n"
        'if [ "$rc" -ne 0 ]; then exit "$rc"; fi\n'
        f'srun --nodelist="$(cat {q(str(out))}.nodes)" --ntasks-per-node=1 '
        f'-N "$(cat {q(str(out))}.nodes | {q(sys.executable)} -c '
        "'import sys,hostlist; print(len(hostlist.expand_hostlist(sys.stdin.read().strip())))')\" "
        f"printenv SLURMD_NODENAME | sort > {q(str(out))}.ran\n"
    )


def node_states(c: EmbeddedCluster) -> dict[str, tuple[str, str | None]]:
    nodes = parse_nodes_json(c.run("sinfo", "--json").stdout)
    return {n: (s.state, s.reason) for n, s in nodes.items()}


def restore(c: EmbeddedCluster, nodes: list[str]) -> None:
    c.cancel_all()
    for node in nodes:
        c.run("scontrol", "update", f"NodeName={node}", "State=RESUME", check=False)


def test_gate_excludes_and_drains_faulty_node_keeps_operator_reason(
    embedded_cluster: EmbeddedCluster, tmp_path: Path
) -> None:
    c = embedded_cluster
    site = gpu_site(c, tmp_path)
    env = fault_env(tmp_path, {"n3": "remap-pending", "n4": "nvlink-down"})
    out, go = tmp_path / "job1", tmp_path / "go"
    placement = tmp_path / "placement.json"  # what gantry submit writes, in rank order
    roles = [{"node": n, "leaf": "leaf", "ranks": [{"replica": 0, "stage": i}]}
             for i, n in enumerate(("n1", "n3"))] + [{"node": n, "leaf": "leaf", "ranks": []}
                                                     for n in ("n4", "n5")]
    placement.write_text(json.dumps({"mode": "planned", "plan": {"roles": roles}}))
    extra = f"--spares 3 --placement {shlex.quote(str(placement))}"
    try:
        job = c.run(
            "sbatch",
            "--parsable",
            "-N5",
            "--nodelist=n[1-5]",
            f"--output={tmp_path}/job1.log",
            str(_write(tmp_path / "job1.sh", gate_script(site, out, extra, go))),
            env=env,
        ).stdout.strip()
        c.wait_job(job, states=("RUNNING",), timeout=60)
        # The operator drains n4 while the job holds it (node becomes DRAINING).
        c.run("scontrol", "update", "NodeName=n4", "State=DRAIN", f"Reason={OPERATOR_REASON}")
        go.write_text("go\n")
        info = c.wait_job(job, timeout=120)
        log = (tmp_path / "job1.log").read_text()
        assert info.state == "COMPLETED", log
        report = json.loads(out.with_suffix(".json").read_text())
        assert report["decision"] == "go", report
        assert report["node_list"] == ["n1", "n5"]
        assert report["replaced"] == {"n3": "n5"}
        assert report["excluded"] == ["n3", "n4"]
        assert report["drained"] == ["n3"]
        assert report["verdicts"]["n3"]["reason"] == "gantry:gpu.row_remap:gpu1-pending"
        assert report["verdicts"]["n4"]["failing"] == ["gpu.nvlink"]
        assert out.with_suffix(".ran").read_text().split() == ["n1", "n5"]
        assert ("gantry gate: go: 2 healthy nodes n[1,5], excluded n[3-4], n5 takes planned "
                "n3's place, 1 spare left unused") in log
        states = node_states(c)
        assert states["n3"][1] == "gantry:gpu.row_remap:gpu1-pending"
        assert "DRAIN" in states["n3"][0]
        assert states["n4"][1] == OPERATOR_REASON  # untouched
        for healthy in ("n1", "n2", "n5"):
            assert "DRAIN" not in states[healthy][0] and states[healthy][1] is None
    finally:
        restore(c, ["n3", "n4"])


def test_gate_requeues_excluding_bad_node_then_runs(
    embedded_cluster: EmbeddedCluster, tmp_path: Path
) -> None:
    c = embedded_cluster
    site = gpu_site(c, tmp_path)
    env = fault_env(tmp_path, {"n6": "clocks-hw-slowdown"})
    out = tmp_path / "job2"
    try:
        job = c.run(
            # n5-n7 are the only candidates; the tree plugin picks n5+n6 (one leaf switch).
            "sbatch",
            "--parsable",
            "--requeue",
            "-N2",
            "--exclude=n[1-4,8]",
            f"--output={tmp_path}/job2.log",
            "--open-mode=append",
            str(_write(tmp_path / "job2.sh", gate_script(site, out, ""))),
            env=env,
        ).stdout.strip()
        info = c.wait_job(job, states=("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT"), timeout=180)
        log = (tmp_path / "job2.log").read_text()
        assert info.state == "COMPLETED", log
        assert "requeue job" in log and "excluding n6" in log
        assert "ExcNodeList=n[1-4,6,8]" in log
        shown = c.run("scontrol", "show", "job", "-o", job).stdout
        assert "Restarts=1" in shown
        assert info.nodes == "n[5,7]"  # kept its own exclusions and added n6
        report = json.loads(out.with_suffix(".json").read_text())  # the second run's
        assert report["decision"] == "go" and len(report["node_list"]) == 2
        assert node_states(c)["n6"][1] == "gantry:gpu.clocks:gpu1-hw_slowdown"
    finally:
        restore(c, ["n6"])


def test_health_check_resumes_only_its_own_drain_after_k_passes(
    embedded_cluster: EmbeddedCluster, tmp_path: Path
) -> None:
    c = embedded_cluster
    site = gpu_site(c, tmp_path)
    scripts = tmp_path / "scripts"
    made = c.gantry("preflight-scripts", str(scripts), "--site", str(site))
    assert made.returncode == 0, made.stderr
    health = scripts / "gantry-healthcheck.sh"
    faulty = fault_env(tmp_path, {"n7": "ecc-dbe"})
    try:
        c.run("scontrol", "update", "NodeName=n8", "State=DRAIN", f"Reason={OPERATOR_REASON}")
        c.run(str(health), env={**faulty, "SLURMD_NODENAME": "n7"})
        assert node_states(c)["n7"][1] == "gantry:gpu.ecc:gpu0-volatile-uncorrectable"
        healthy = fault_env(tmp_path / "healthy", {})
        for node in ("n7", "n8"):  # first clean pass: still drained (K=2)
            c.run(str(health), env={**healthy, "SLURMD_NODENAME": node})
        assert "DRAIN" in node_states(c)["n7"][0]
        for node in ("n7", "n8"):  # second clean pass: gantry's own drain is resumed
            c.run(str(health), env={**healthy, "SLURMD_NODENAME": node})
        states = node_states(c)
        assert "DRAIN" not in states["n7"][0] and states["n7"][1] is None
        assert "DRAIN" in states["n8"][0] and states["n8"][1] == OPERATOR_REASON
    finally:
        restore(c, ["n7", "n8"])


HOSTILE_REASON = "PSU swap, jobs moved to NodeName=n7 State=IDLE Reason=gantry:x:y"


@pytest.mark.parametrize("reader", ["json", "text"])
def test_hostile_operator_text_never_lends_gantry_a_node(
    embedded_cluster: EmbeddedCluster, tmp_path: Path, reader: str
) -> None:
    """n6 is drained by an operator with a reason naming n7; n7 carries a comment naming n8,
    which an operator drained too. n6 and n7 fail preflight, then pass twice: gantry drains
    and resumes n7 alone; both operators' reasons stay exactly as written. ``text`` makes
    sinfo --json fail, so the scontrol text form is read: there n7's comment holds
    ``Reason=``, its record is unreadable, and gantry leaves n7 undrained."""
    c = embedded_cluster
    site = gpu_site(c, tmp_path)
    scripts = tmp_path / "scripts"
    made = c.gantry("preflight-scripts", str(scripts), "--site", str(site))
    assert made.returncode == 0, made.stderr
    health = scripts / "gantry-healthcheck.sh"
    reader_env = {"GANTRY_SINFO": "/bin/false"} if reader == "text" else {}
    faulty = {**fault_env(tmp_path, {"n6": "ecc-dbe", "n7": "ecc-dbe"}), **reader_env}
    healthy = {**fault_env(tmp_path / "healthy", {}), **reader_env}
    try:
        c.run("scontrol", "update", "NodeName=n6", "State=DRAIN", f"Reason={HOSTILE_REASON}")
        c.run("scontrol", "update", "NodeName=n8", "State=DRAIN", f"Reason={OPERATOR_REASON}")
        c.run("scontrol", "update", "NodeName=n7", "Comment=moved from NodeName=n8 Reason=x")
        for node in ("n6", "n7"):
            c.run(str(health), env={**faulty, "SLURMD_NODENAME": node})
        states = node_states(c)
        assert states["n6"][1] == HOSTILE_REASON
        n7_drained = "gantry:gpu.ecc:gpu0-volatile-uncorrectable" if reader == "json" else None
        assert states["n7"][1] == n7_drained  # text: the comment hides where a reason starts
        for _ in range(2):
            for node in ("n6", "n7", "n8"):
                c.run(str(health), env={**healthy, "SLURMD_NODENAME": node})
        states = node_states(c)
        assert "DRAIN" in states["n6"][0] and states["n6"][1] == HOSTILE_REASON
        assert "DRAIN" in states["n8"][0] and states["n8"][1] == OPERATOR_REASON
        assert "DRAIN" not in states["n7"][0] and states["n7"][1] is None
    finally:
        c.run("scontrol", "update", "NodeName=n7", "Comment=", check=False)
        restore(c, ["n6", "n7", "n8"])


def _write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(0o755)
    return path
