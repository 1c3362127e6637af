"""The pieces that join placement, submit and the trainer (no cluster needed): live node states
-> free/unhealthy, the placement decision and its modes, the node rank order the trainer
resolves (spares taking over), the job directory's spec, the rendered launch line, `gantry
plan job.yaml`, and the run history `gantry status` shows."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from launcher.errors import GantryError, UserInputError
from launcher.job_dir import JobDir, portable_spec
from launcher.job_placement import (
    LiveState,
    decide_placement,
    state_from_nodes,
)
from launcher.job_request import resolve_request
from launcher.job_script import render_job
from launcher.job_state import run_history
from launcher.site_config import load_site
from launcher.site_topology import site_topology
from launcher.slurm import NodeInfo
from launcher.train.layout import order_from_nodes, read_rank_order
from topology.placement import SlurmVersion

REPO = Path(__file__).resolve().parents[2]
SITE = REPO / "site_configs" / "local.yaml"
EXAMPLE = REPO / "examples" / "gpt2-tiny-pp2-dp2.yaml"
V22 = SlurmVersion(22, 5, 8)


def nodes(**states: str) -> list[NodeInfo]:
    """NodeInfo for n1..n8: idle unless given as "STATE[+FLAG][:reason]"."""
    out = []
    for i in range(1, 9):
        text = states.get(f"n{i}", "IDLE")
        text, _, reason = text.partition(":")
        state, *flags = text.split("+")
        out.append(NodeInfo(f"n{i}", state, tuple(flags), reason))
    return out


def live(**states: str) -> LiveState:
    return state_from_nodes(nodes(**states), load_site(SITE), V22, "test")


def test_free_and_unhealthy_from_node_states() -> None:
    state = live(n1="ALLOCATED", n2="MIXED", n3="IDLE+DRAIN:gantry:gpu0:xid79",
                 n4="IDLE+DRAIN:operator maintenance", n5="DOWN+NOT_RESPONDING",
                 n6="IDLE+NOT_RESPONDING", n7="MIXED+DRAIN:gantry:disk:full")
    assert state.free == {"n2", "n8"}
    assert state.unhealthy == {"n3", "n7"}  # only what gantry drained; the operator's is not
    assert dict(state.states)["n3"] == "IDLE+DRAIN"


def test_another_cluster_is_refused() -> None:
    other = [NodeInfo("gpu01", "IDLE"), NodeInfo("gpu02", "IDLE")]
    with pytest.raises(GantryError, match=r"has gpu\[01-02\], none of site local's nodes"):
        state_from_nodes(other, load_site(SITE), V22, "SLURM_CONF=/x")


def test_planned_placement_from_live_state() -> None:
    request = resolve_request(EXAMPLE, SITE)  # pp 2 x dp 2 on 4 nodes + 1 spare
    state = live(n1="ALLOCATED", n3="ALLOCATED", n5="IDLE+DRAIN:gantry:x:y")
    placed = decide_placement(request, site_topology(request.site), state)
    assert placed.mode == "planned"
    assert set(placed.rank_nodes) | set(placed.spare_nodes) <= state.free
    assert len(placed.rank_nodes) == 4 and len(placed.spare_nodes) == 1
    assert "--exclude=n5" in placed.sbatch_options
    assert "--nodes=5" in placed.sbatch_options
    script = placed.script_placement()
    assert script.nodes == placed.rank_nodes
    record = placed.to_json()
    assert record["cluster_state"]["unhealthy"] == ["n5"]
    assert [r["node"] for r in record["plan"]["roles"]] == [*placed.rank_nodes,
                                                            *placed.spare_nodes]


def test_too_few_free_nodes_lets_slurm_choose_within_bounds() -> None:
    request = resolve_request(EXAMPLE, SITE)
    busy = {f"n{i}": "ALLOCATED" for i in range(1, 6)}
    placed = decide_placement(request, site_topology(request.site),
                              live(**busy, n6="IDLE+DRAIN:gantry:x:y"))
    assert placed.mode == "slurm" and placed.rank_nodes == ()
    # 5 nodes without n6 on an idle cluster: n[1-5] under the core, 3 leaf switches
    assert placed.sbatch_options == ("--switches=3@10:00", "--exclude=n6")
    assert "only 2 are free" in placed.summary


def test_unknown_state_and_impossible_requests() -> None:
    request = resolve_request(EXAMPLE, SITE)
    placed = decide_placement(request, site_topology(request.site), None, "Slurm not reachable")
    assert placed.mode == "none" and placed.sbatch_options == ()
    assert placed.notes == ("Slurm not reachable",)
    drained = {f"n{i}": "IDLE+DRAIN:gantry:x:y" for i in range(1, 5)}
    with pytest.raises(UserInputError, match="resources: the job needs 5 nodes"):
        decide_placement(request, site_topology(request.site), live(**drained))


def test_node_rank_order_follows_the_plan_and_spares_take_over() -> None:
    # world ranks as srun starts them: node order n1, n2, n3, n4 (2 ranks each)
    rank_nodes = ["n1", "n1", "n2", "n2", "n3", "n3", "n4", "n4"]
    assert order_from_nodes(["n3", "n4", "n1", "n2"], rank_nodes, "f") == [4, 5, 6, 7, 0, 1, 2,
                                                                           3]
    # n2 failed preflight; spare n9 runs instead and plays n2's positions
    rank_nodes = ["n1", "n3", "n4", "n9"]
    assert order_from_nodes(["n3", "n4", "n1", "n2"], rank_nodes, "f") == [1, 2, 0, 3]
    with pytest.raises(UserInputError, match="2 planned nodes"):
        order_from_nodes(["n1", "n2"], ["n1", "n2", "n3"], "f")
    with pytest.raises(UserInputError, match="ranks per node differ"):
        order_from_nodes(["n1", "n2"], ["n1", "n1", "n2"], "f")


def test_rank_order_file_of_node_names(tmp_path: Path) -> None:
    path = tmp_path / "rank_order.json"
    path.write_text(json.dumps(["n2", "n1"]))
    assert read_rank_order(path, 2, ["n1", "n2"]) == [1, 0]
    path.write_text(json.dumps([1, 0]))
    assert read_rank_order(path, 2, ["n1", "n2"]) == [1, 0]
    path.write_text(json.dumps(["n2", 0]))
    with pytest.raises(UserInputError, match="expected a list of integer world ranks or node"):
        read_rank_order(path, 2, ["n1", "n2"])


def test_job_dir_spec_makes_input_paths_absolute(tmp_path: Path) -> None:
    raw: dict[str, Any] = {
        "name": "a", "checkpoint": {"dir": "ckpt"},
        "train": {"init_weights": "w.safetensors", "data": "/d/*.bin", "steps": 3}}
    out = portable_spec(raw, tmp_path)
    assert out["train"] == {"init_weights": str(tmp_path / "w.safetensors"),
                            "data": "/d/*.bin", "steps": 3}
    assert out["checkpoint"] == {"dir": "ckpt"}  # relative: inside the job directory
    assert raw["train"]["init_weights"] == "w.safetensors"  # input untouched


def test_rendered_launch_runs_gantry_train(tmp_path: Path) -> None:
    request = resolve_request(EXAMPLE, SITE)
    state = live()
    placed = decide_placement(request, site_topology(request.site), state)
    job_dir = tmp_path / "jobdir"
    lib = tmp_path / "lib" / "libgantry_native.so"
    text = render_job(request, job_dir, tmp_path, placed.script_placement(), library=lib)
    launch = text[text.index("launch --"):]
    assert (f"-m launcher train {job_dir}/spec.yaml --run-dir {job_dir}/runs/"
            f"gpt2-tiny-pp2-dp2 --lib {lib} --rank-order {job_dir}/rank_order.json "
            "--resume\n") in launch
    # the gate keeps the planned nodes that pass preflight (spares take the others' places)
    assert (f"preflight gate --site {request.site.path} --placement {job_dir}/placement.json "
            '--reports "$attempt_dir/preflight.jsonl"') in text
    # requeueable (the default): the planned domain (core: all 8), no nodelist
    assert "#SBATCH --nodelist" not in text and "#SBATCH --switches=3@10:00\n" in text
    check = subprocess.run(["bash", "-n"], input=text, text=True, capture_output=True,
                           check=False)
    assert check.returncode == 0, check.stderr


def test_without_preflight_the_planned_nodes_train(tmp_path: Path) -> None:
    job = tmp_path / "job.yaml"
    body = yaml.safe_load(EXAMPLE.read_text())
    body["policy"] = {"preflight_level": "off"}
    body.pop("checkpoint")
    job.write_text(yaml.safe_dump(body))
    request = resolve_request(job, SITE)
    placed = decide_placement(request, site_topology(request.site), live(n1="ALLOCATED"))
    text = render_job(request, tmp_path / "jd", tmp_path, placed.script_placement())
    assert f"launch_nodes={','.join(placed.rank_nodes)}\n" in text
    assert "/runs/gpt2-tiny-pp2-dp2 --site " in text  # library unknown: the site's build


def test_plan_takes_the_job_file(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    result = subprocess.run(
        [sys.executable, "-m", "launcher", "plan", str(EXAMPLE), "--site", str(SITE),
         "--offline", "--free", "n[2-8]", "--slurm-version", "22.05", "--json"],
        capture_output=True, text=True, check=False, env=env, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    assert (data["request"]["nodes"], data["request"]["spares"], data["request"]["pp"],
            data["request"]["dp"]) == (4, 1, 2, 2)
    assert "n1" not in [r["node"] for r in data["roles"]]
    override = subprocess.run(
        [sys.executable, "-m", "launcher", "plan", str(EXAMPLE), "--site", str(SITE),
         "--offline", "--nodes", "8", "--spares", "0", "--slurm-version", "22.05", "--json"],
        capture_output=True, text=True, check=False, env=env, cwd=tmp_path)
    assert override.returncode == 0, override.stderr
    assert json.loads(override.stdout)["request"]["dp"] == 4  # recomputed: 8 nodes / pp 2
    bad = subprocess.run(
        [sys.executable, "-m", "launcher", "plan", str(EXAMPLE), "--site", str(SITE),
         "--offline", "--dp", "3"], capture_output=True, text=True, check=False, env=env,
        cwd=tmp_path)
    assert bad.returncode == 2 and bad.stderr.startswith(f"error: {EXAMPLE} with --dp: dp: ")
    assert len(bad.stderr.splitlines()) == 1


def test_run_history_for_status(tmp_path: Path) -> None:
    ckpt = tmp_path / "ckpt"
    for step, complete in ((2, True), (4, True), (6, False)):
        (ckpt / f"step_{step:08d}").mkdir(parents=True)
        if complete:
            (ckpt / f"step_{step:08d}" / "manifest.json").write_text("{}")
    (tmp_path / "runs" / "12-10").mkdir(parents=True)
    (tmp_path / "runs" / "12-9").mkdir()
    (tmp_path / "runs" / "job-name").mkdir()  # the trainer's run dir: not an attempt
    (tmp_path / "request.json").write_text(json.dumps({"checkpoint_dir": str(ckpt)}))
    history = run_history(JobDir(tmp_path))
    assert history["attempts"] == ["12-9", "12-10"]
    assert history["latest_checkpoint_step"] == 4
    assert history["latest_checkpoint"] == str(ckpt / "step_00000004")
    (tmp_path / "request.json").write_text("{}")
    assert run_history(JobDir(tmp_path))["checkpoint_dir"] is None


def small_job(tmp_path: Path, requeue: bool) -> Path:
    job = tmp_path / f"small-{requeue}.yaml"
    job.write_text(yaml.safe_dump({
        "name": "small", "model": {"n_layer": 2, "n_head": 2, "n_embd": 8},
        "parallelism": {"pp": 2, "dp": 1}, "resources": {"nodes": 2, "spares": 1},
        "policy": {"preflight_level": "off", "requeue": requeue}}))
    return job


def test_requeueable_jobs_are_held_to_the_domain_others_to_the_nodes(tmp_path: Path) -> None:
    state = live(n8="IDLE+DRAIN:gantry:x:y")
    request = resolve_request(small_job(tmp_path, True), SITE)
    domain = decide_placement(request, site_topology(request.site), state)
    assert domain.pin == "domain" and domain.plan is not None
    # best fit: spine2 has exactly 3 healthy free nodes
    assert domain.plan.domain == "spine2" and domain.rank_nodes == ("n5", "n6")
    # a requeue after a node loss must stay runnable: no required nodes, the rest excluded
    assert domain.sbatch_options == ("--nodes=3", "--switches=2@10:00", "--exclude=n[1-4,8]")
    request = resolve_request(small_job(tmp_path, False), SITE)
    exact = decide_placement(request, site_topology(request.site), state)
    assert exact.pin == "exact"
    assert exact.sbatch_options == ("--nodes=3", "--nodelist=n[5-7]", "--switches=2@10:00",
                                    "--exclude=n8")
    text = render_job(request, tmp_path / "jd", tmp_path, exact.script_placement())
    assert "#SBATCH --nodelist=n[5-7]\n#SBATCH --switches=2@10:00\n#SBATCH --exclude=n8\n" \
        in text


def test_planned_launch_nodes_fall_back_to_the_allocation(tmp_path: Path) -> None:
    """Preflight off: the planned nodes when allocated, else the first nodes (bash run)."""
    request = resolve_request(small_job(tmp_path, True), SITE)
    placed = decide_placement(request, site_topology(request.site), live())
    text = render_job(request, tmp_path / "jd", tmp_path, placed.script_placement())
    block = text[text.index("launch_nodes=n1,n2"):text.index('if [ -z "$launch_nodes" ]')]
    for allocated, expected in (("n1\nn2\nn3", "n1,n2"), ("n1\nn3\nn4", "n1,n3")):
        script = ("log() { :; }\nranks_nodes=2\n"
                  f"scontrol() {{ printf '%s\\n' {' '.join(allocated.split())}; }}\n"
                  + block + 'printf %s "$launch_nodes"\n')
        out = subprocess.run(["bash", "-c", script], capture_output=True, text=True,
                             check=True, env={"SLURM_JOB_NODELIST": "x", "PATH": os.defpath})
        assert out.stdout == expected, (allocated, out.stdout, out.stderr)
