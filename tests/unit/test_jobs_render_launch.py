"""Command jobs' launch modes: golden scripts for per-rank and torchrun, PyTorch's environment
per rank (launcher/torch_env.py), ranks from nodes x GPUs, the job file's `launch` field, and
the run monitor with step-watch stopping the step on an eviction.

Regenerate the golden files after an intended change with
``GANTRY_UPDATE_GOLDEN=1 pytest tests/unit/test_jobs_render_launch.py`` and review the diff.
"""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from launcher.errors import UserInputError
from launcher.job_overrides import CliOverrides
from launcher.job_request import resolve_request
from launcher.job_script import command_argv, script_inputs
from launcher.sbatch_render import LaunchStep, render_script
from launcher.torch_env import rank_env
from tests.unit.test_jobs_render import GOLDEN, base_inputs
from tests.unit.test_jobs_render import VARIANTS as TRAINER_VARIANTS

REPO = Path(__file__).resolve().parents[2]
GANTRY = ("/opt/venv/bin/python", "-m", "launcher")
COMMAND = ("python", "examples/ddp/train_ddp.py", "--steps", "20", "--out", "it's $HOME.jsonl")


def command_inputs(mode: str, launcher: str = "srun", nodes: int = 4,
                   ranks_per_node: int = 1) -> object:
    argv, tasks = command_argv(mode, COMMAND, GANTRY, nodes, ranks_per_node,  # type: ignore[arg-type]
                               python="/opt/venv/bin/python")
    launch = LaunchStep(launcher=launcher, argv=argv, tasks_per_node=tasks,  # type: ignore[arg-type]
                        rendezvous_argv=(*GANTRY, "torch-env", "--free-port"))
    recovery = dataclasses.replace(base_inputs().recovery, stop_on_eviction=True)  # type: ignore[type-var]
    return base_inputs(job_name="ddp", recovery=recovery, nodes=nodes,
                       ranks_per_node=ranks_per_node,
                       gpus_per_node=ranks_per_node if ranks_per_node > 1 else 0,
                       layout=f"{nodes * ranks_per_node} ranks ({mode}) on {nodes} nodes x "
                              f"{ranks_per_node} rank (+1 spare)", launch=launch)


VARIANTS = {
    "command-per-rank": command_inputs("per-rank"),
    "command-torchrun": command_inputs("torchrun", nodes=2, ranks_per_node=8),
    "command-torchrun-mpirun": command_inputs("torchrun", launcher="mpirun", nodes=2,
                                              ranks_per_node=8),
}


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_golden(variant: str, tmp_path: Path) -> None:
    text = render_script(VARIANTS[variant])  # type: ignore[arg-type]
    golden = GOLDEN / f"{variant}.sbatch"
    if os.environ.get("GANTRY_UPDATE_GOLDEN"):
        golden.write_text(text)
    assert golden.exists(), f"{golden} missing: run with GANTRY_UPDATE_GOLDEN=1"
    assert text == golden.read_text()
    script = tmp_path / "job.sbatch"
    script.write_text(text)
    check = subprocess.run(["bash", "-n", str(script)], capture_output=True, text=True,
                           check=False)
    assert check.returncode == 0, check.stderr


def launch_line(text: str) -> str:
    start = text.index("run_step ${launch_prefix[@]+")
    return text[start:text.index("\nstep_rc=", start)]


def test_per_rank_runs_torch_env_on_every_rank() -> None:
    text = render_script(VARIANTS["command-per-rank"])  # type: ignore[arg-type]
    line = launch_line(text)
    assert '--ntasks="$((ranks_nodes * ranks_per_node))" --ntasks-per-node="$ranks_per_node"' \
        in line
    assert ('/opt/venv/bin/python -m launcher torch-env --nodes="$launch_nodes" '
            "--ranks-per-node=1 -- python examples/ddp/train_ddp.py --steps 20 --out "
            "'it'\"'\"'s $HOME.jsonl'") in line
    # The rendezvous is found again before every launch (a recovery relaunch too).
    loop = text[text.index("while :; do"):]
    assert loop.index("export MASTER_PORT") < loop.index("run_step")
    assert 'master_node=${launch_nodes%%,*}' in loop


def test_torchrun_starts_one_agent_per_node_with_a_c10d_rendezvous() -> None:
    line = launch_line(render_script(VARIANTS["command-torchrun"]))  # type: ignore[arg-type]
    assert '--ntasks="$((ranks_nodes * 1))" --ntasks-per-node=1' in line
    assert "--cpus-per-task=8" in line  # the agent holds its 8 ranks' CPUs
    # Unbuffered, teeing every worker's lines with its global rank (launcher/step_labels.py).
    assert ("env 'TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE=[torchrun:${rank}] ' "
            '/opt/venv/bin/python -u -m torch.distributed.run --nnodes=2 --nproc-per-node=8 '
            '--rdzv-backend=c10d --rdzv-endpoint="$MASTER_ADDR:$MASTER_PORT" '
            '--rdzv-id="$SLURM_JOB_ID" --max-restarts=0 --tee=3 '
            '--log-dir="$GANTRY_ATTEMPT_DIR/torchrun_logs" --no-python python '
            "examples/ddp/train_ddp.py") in line
    assert "--label" in line  # srun labels each agent's (node's) lines too
    mpirun = launch_line(render_script(VARIANTS["command-torchrun-mpirun"]))  # type: ignore[arg-type]
    assert 'mpirun -np "$((ranks_nodes * 1))"' in mpirun and '"ppr:1:node"' in mpirun
    assert "--tag-output" in mpirun


def test_every_launch_labels_its_ranks_lines() -> None:
    """srun --label, mpirun --tag-output: for the trainer and command jobs alike."""
    for name, inputs in [*TRAINER_VARIANTS.items(), *VARIANTS.items()]:
        line = launch_line(render_script(inputs))  # type: ignore[arg-type]
        flag = "--tag-output" if " mpirun -np " in line else "--label"
        assert flag in line, name


def test_the_trainer_gets_no_rendezvous() -> None:
    text = render_script(base_inputs())
    assert "MASTER_ADDR" not in text and "torch-env" not in text


def test_launch_argv_is_carried_literally(tmp_path: Path) -> None:
    """The per-rank line run by bash with srun and gantry replaced by printf: the command
    reaches torch-env unchanged and $launch_nodes expands."""
    line = launch_line(render_script(VARIANTS["command-per-rank"]))  # type: ignore[arg-type]
    argv_part = line[line.index("/opt/venv/bin/python"):]
    probe = f"launch_nodes=n5,n2\nprintf '%s\\0' {argv_part}"
    out = subprocess.run(["bash", "-c", probe], capture_output=True, check=True).stdout
    assert out.decode().split("\0")[:-1] == [
        *GANTRY, "torch-env", "--nodes=n5,n2", "--ranks-per-node=1", "--", *COMMAND]


def test_rank_env_follows_the_gates_node_order() -> None:
    nodes = ["n5", "n2", "n3", "n4"]  # n5 took n1's place: it is node 0
    env = rank_env(nodes, 2, {"SLURMD_NODENAME": "n5", "SLURM_LOCALID": "1",
                              "SLURM_PROCID": "7"}).variables()
    assert env == {"RANK": "1", "WORLD_SIZE": "8", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "2",
                   "NODE_RANK": "0", "GROUP_RANK": "0", "GANTRY_TASK_ID": "7"}
    third = rank_env(nodes, 2, {"SLURMD_NODENAME": "n3", "SLURM_LOCALID": "0",
                                "SLURM_PROCID": "2"})
    assert (third.rank, third.node_rank) == (4, 2)
    mpirun = rank_env(nodes, 2, {"OMPI_COMM_WORLD_LOCAL_RANK": "1", "OMPI_COMM_WORLD_RANK": "5"})
    assert (mpirun.rank, mpirun.node_rank, mpirun.local_rank) == (5, 2, 1)
    # Under mpirun a rank inherits the SLURM_* of the orted srun started on its node.
    orted = {"SLURMD_NODENAME": "n2", "SLURM_LOCALID": "0", "SLURM_PROCID": "1",
             "OMPI_COMM_WORLD_LOCAL_RANK": "1", "OMPI_COMM_WORLD_RANK": "3"}
    under = rank_env(nodes, 2, orted)
    assert (under.rank, under.node_rank, under.local_rank, under.task_id) == (3, 1, 1, 3)


@pytest.mark.parametrize(("env", "message"), [
    ({}, "no local rank"),
    ({"SLURM_LOCALID": "0", "SLURM_PROCID": "0", "SLURMD_NODENAME": "n9"},
     "node n9 is not a launch node"),
    ({"SLURM_LOCALID": "2", "SLURM_PROCID": "2", "SLURMD_NODENAME": "n1"}, "local rank 2"),
])
def test_rank_env_refuses_what_it_cannot_place(env: dict[str, str], message: str) -> None:
    with pytest.raises(UserInputError, match=message):
        rank_env(["n1", "n2"], 2, env)


def test_torch_env_execs_the_command_with_the_environment() -> None:
    env = {**os.environ, "SLURM_LOCALID": "0", "SLURM_PROCID": "1", "SLURMD_NODENAME": "n1",
           "PYTHONPATH": str(REPO)}
    result = subprocess.run(
        [sys.executable, "-m", "launcher",
         "torch-env", "--nodes", "n2,n1", "--ranks-per-node", "1", "--", "sh", "-c",
         'echo "$RANK $WORLD_SIZE $NODE_RANK $LOCAL_RANK $LOCAL_WORLD_SIZE"'],
        capture_output=True, text=True, env=env, check=False, cwd=REPO)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["1", "2", "1", "0", "1"]


def write_job(tmp_path: Path, **body: object) -> Path:
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump({"name": "ddp", **body}))
    return path


def test_a_command_job_gets_ranks_from_nodes_x_gpus(tmp_path: Path) -> None:
    site = REPO / "site_configs" / "local.yaml"
    job = write_job(tmp_path, resources={"nodes": 4, "spares": 1}, launch="torchrun",
                    command=["python", "train.py"])
    request = resolve_request(job, site)
    assert request.ranks == 4 and request.spec.parallelism.dp == 4
    inputs = script_inputs(request, tmp_path / "jobdir", tmp_path, gantry=GANTRY)
    assert inputs.launch.tasks_per_node == 1
    assert inputs.layout == "4 ranks (torchrun) on 4 nodes x 1 rank (+1 spare)"
    assert inputs.launch.rendezvous_argv == (*GANTRY, "torch-env", "--free-port")
    # Without a command gantry's trainer needs its parallelism spelled out, as before.
    trainer = write_job(tmp_path, resources={"nodes": 4})
    with pytest.raises(UserInputError, match=r"pp\(1\) \* dp\(1\) = 1 ranks but 4 nodes"):
        resolve_request(trainer, site)


def test_a_command_job_is_monitored_when_recovery_can_stop_its_step(tmp_path: Path) -> None:
    site = REPO / "site_configs" / "local.yaml"
    job = write_job(tmp_path, resources={"nodes": 2, "spares": 1}, command=["python", "t.py"],
                    policy={"monitor_interval_s": 0.5})
    inputs = script_inputs(resolve_request(job, site), tmp_path / "jobdir", tmp_path,
                           gantry=GANTRY)
    assert inputs.monitor is not None and inputs.monitor.interval == "0.5"
    assert inputs.monitor.argv == (*GANTRY, "monitor", "--site", str(site))
    assert inputs.recovery is not None and inputs.recovery.stop_on_eviction
    assert inputs.evict_argv == ()  # the recovery step handles the eviction
    text = render_script(inputs)
    assert text.count("--stop-on-eviction --stop-grace 30 --)") == 2  # first launch, relaunch
    assert "--interval 0.5" in text
    # The site's interval when the job sets none; 0 switches the monitor off.
    default = write_job(tmp_path, resources={"nodes": 2}, command=["python", "t.py"])
    monitor = script_inputs(resolve_request(default, site), tmp_path / "j", tmp_path,
                            gantry=GANTRY).monitor
    assert monitor is not None and monitor.interval_s == 30.0
    off = write_job(tmp_path, resources={"nodes": 2}, command=["python", "t.py"],
                    policy={"monitor_interval_s": 0})
    assert script_inputs(resolve_request(off, site), tmp_path / "j", tmp_path,
                         gantry=GANTRY).monitor is None


def test_without_recovery_a_command_job_gets_no_monitor(tmp_path: Path) -> None:
    """Nothing could stop the command's step on an eviction: no monitor, no evict path."""
    site = REPO / "site_configs" / "local.yaml"
    job = write_job(tmp_path, resources={"nodes": 2}, command=["python", "t.py"],
                    policy={"monitor_interval_s": 0.5, "recover_in_allocation": False})
    inputs = script_inputs(resolve_request(job, site), tmp_path / "jobdir", tmp_path,
                           gantry=GANTRY)
    assert (inputs.monitor, inputs.recovery, inputs.evict_argv) == (None, None, ())
    text = render_script(inputs)
    assert "-m launcher monitor" not in text and "gantry monitor" not in text
    assert "step-watch" not in text


def test_the_trainer_checkpoints_on_an_eviction_itself(tmp_path: Path) -> None:
    """gantry's trainer is never stopped early by step-watch."""
    inputs = script_inputs(resolve_request(REPO / "examples" / "gpt2-tiny-pp2-dp2.yaml",
                                           REPO / "site_configs" / "local.yaml"),
                           tmp_path / "jobdir", tmp_path, gantry=GANTRY)
    assert inputs.recovery is not None and not inputs.recovery.stop_on_eviction
    assert inputs.monitor is not None
    assert "--stop-on-eviction" not in render_script(inputs)


def test_torchrun_needs_a_command(tmp_path: Path) -> None:
    job = write_job(tmp_path, launch="torchrun")
    with pytest.raises(UserInputError, match="launch: 'torchrun' needs a command"):
        resolve_request(job, REPO / "site_configs" / "local.yaml")


@pytest.mark.parametrize("name", ["ddp-cpu.yaml", "ddp-gpu.yaml"])
def test_the_ddp_examples_resolve(name: str) -> None:
    request = resolve_request(REPO / "examples" / "ddp" / name,
                              REPO / "site_configs" / "local.yaml")
    assert request.spec.command and request.spec.command[1] == "examples/ddp/train_ddp.py"
    assert request.ranks == request.spec.resources.nodes



def test_the_launch_flag_sets_the_mode(tmp_path: Path) -> None:
    job = write_job(tmp_path, resources={"nodes": 2})
    request = resolve_request(job, REPO / "site_configs" / "local.yaml",
                              CliOverrides(launch="torchrun", command=("python", "x.py")))
    assert request.spec.launch == "torchrun" and request.ranks == 2
    assert "--launch" in request.overrides_used
    inputs = script_inputs(request, tmp_path / "jobdir", tmp_path, gantry=GANTRY)
    assert inputs.launch.tasks_per_node == 1
    assert inputs.launch.argv[-3:] == ("--no-python", "python", "x.py")
