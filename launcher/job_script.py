"""Turns a resolved JobRequest into the batch script's inputs and text (pure; no files written).

Plug points for the other parts of gantry: the placement (topology/) arrives as a
:class:`Placement`; the preflight check and gate commands and the training command are argv
tuples built here from how gantry itself is invoked (:func:`gantry_argv`).
"""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Sequence
from pathlib import Path

import launcher
from launcher.errors import UserInputError
from launcher.install_paths import import_root
from launcher.job_dir import (
    ATTEMPT_DIR_ENV,
    PLACEMENT_FILE,
    RANK_ORDER_FILE,
    SPEC_FILE,
    TORCHRUN_LOGS_DIR,
    train_run_dir,
)
from launcher.job_request import JobRequest, spec_source
from launcher.job_spec import LaunchMode
from launcher.sbatch_options import option_name
from launcher.sbatch_render import (
    TEMPLATE_DIR,
    LaunchStep,
    MonitorStep,
    Placement,
    PreflightStep,
    RecoveryStep,
    ScriptInputs,
    Shell,
    env_pairs,
    render_script,
)
from launcher.step_labels import TORCHRUN_PREFIX_ENV, TORCHRUN_PREFIX_TEMPLATE

#: gantry subcommand (after the gantry argv) that checks one node and prints a JSON line.
PREFLIGHT_CHECK: tuple[str, ...] = ("preflight", "--json")
#: gantry subcommand that aggregates the reports and picks the nodes (see PreflightStep).
PREFLIGHT_GATE: tuple[str, ...] = ("preflight", "gate")
#: gantry subcommand of one rank of the gate's fabric test (see PreflightStep).
PREFLIGHT_FABRIC: tuple[str, ...] = ("preflight", "fabric")

def gantry_argv() -> tuple[str, ...]:
    """How a job step runs gantry: this interpreter with ``-m launcher`` (the script puts
    :func:`launcher.install_paths.import_root` before the user's PYTHONPATH when gantry is
    not installed)."""
    return (sys.executable, "-m", "launcher")


def layout_line(request: JobRequest) -> str:
    """E.g. "pp 2 x dp 2 = 4 ranks on 4 nodes x 1 rank (+1 spare)"; a command job's:
    "4 ranks (torchrun) on 4 nodes x 1 rank (+1 spare)"."""
    par, res = request.spec.parallelism, request.spec.resources
    spare = f" (+{res.spares} spare)" if res.spares else ""
    ranks = (f"{request.ranks} ranks ({request.spec.launch})" if request.spec.command
             else f"pp {par.pp} x dp {par.dp} = {request.ranks} ranks")
    return (f"{ranks} on {res.nodes} nodes x "
            f"{request.ranks_per_node} rank{'s' if request.ranks_per_node > 1 else ''}{spare}")


def train_argv(request: JobRequest, job_dir: Path, gantry: Sequence[str],
               library: Path | None = None, rank_order: bool = False) -> tuple[str, ...]:
    """What every rank runs: the job's command, else ``gantry train``.

    ``gantry train <job dir>/spec.yaml --run-dir <job dir>/runs/<name>`` (one metrics
    trajectory across attempts: steps redone after a resume are set aside by the trainer;
    relative checkpoint dirs land in the job directory), the native library built
    for the site at submit (``--lib``; ``--site`` when not known), the placement's
    ``--rank-order`` when the nodes were planned, and ``--resume``: every attempt continues
    from the newest complete checkpoint (none on a first attempt in a fresh job directory).
    """
    if request.spec.command:
        return tuple(request.spec.command)
    argv = [*gantry, "train", str(job_dir / SPEC_FILE), "--run-dir",
            str(train_run_dir(job_dir, request.spec.name))]
    if library is not None:
        argv += ["--lib", str(library)]
    else:
        argv += ["--site", str(request.site.path)]
    if rank_order:
        argv += ["--rank-order", str(job_dir / RANK_ORDER_FILE)]
    return (*argv, "--resume")


#: The torchrun agent a torchrun job starts on every node (the job's command follows).
TORCHRUN_MODULE: tuple[str, ...] = ("-m", "torch.distributed.run")


def command_argv(mode: LaunchMode, command: Sequence[str], gantry: Sequence[str],
                 nodes: int, ranks_per_node: int,
                 python: str | None = None) -> tuple[tuple[str, ...], int | None]:
    """What a command job's tasks run, and the tasks per node (None: one per rank).

    ``per-rank``: ``gantry torch-env --nodes "$launch_nodes" --ranks-per-node G -- ARGV``
    on every rank (launcher/torch_env.py sets RANK and the rest in the gate's node order).
    ``torchrun``: one ``python -m torch.distributed.run`` agent per node, ``--nnodes N
    --nproc-per-node G``, a c10d rendezvous at ``$MASTER_ADDR:$MASTER_PORT`` with the job
    id as its id, no agent restarts (gantry's recovery and requeue relaunch the step), and
    ``--no-python ARGV`` (the command is a program, as in per-rank mode). The agent runs on
    ``python``: the interpreter that submitted the job, which needs torch; unbuffered
    (``-u``), it tees each worker's lines (``--tee=3``: stdout and stderr) as they come, each
    with the worker's global rank before it (launcher/step_labels.py), and keeps them per
    rank under ``$GANTRY_ATTEMPT_DIR/torchrun_logs`` (torchrun's ``--log-dir``).
    """
    if mode == "per-rank":
        return (*gantry, "torch-env", Shell('--nodes="$launch_nodes"'),
                f"--ranks-per-node={ranks_per_node}", "--", *command), None
    agent = ("env", f"{TORCHRUN_PREFIX_ENV}={TORCHRUN_PREFIX_TEMPLATE}",
             python or sys.executable, "-u", *TORCHRUN_MODULE, f"--nnodes={nodes}",
             f"--nproc-per-node={ranks_per_node}", "--rdzv-backend=c10d",
             Shell('--rdzv-endpoint="$MASTER_ADDR:$MASTER_PORT"'),
             Shell('--rdzv-id="$SLURM_JOB_ID"'), "--max-restarts=0", "--tee=3",
             Shell(f'--log-dir="${ATTEMPT_DIR_ENV}/{TORCHRUN_LOGS_DIR}"'), "--no-python")
    return (*agent, *command), 1


def launch_step(request: JobRequest, job_dir: Path, gantry: Sequence[str],
                library: Path | None, rank_order: bool) -> LaunchStep:
    """The training step: gantry's trainer on every rank, or the job's command in its
    launch mode with PyTorch's rendezvous exported before each launch."""
    site, spec = request.site.config, request.spec
    step = LaunchStep(launcher=site.mpi.launcher, srun_mpi=site.mpi.srun_mpi,
                      argv=train_argv(request, job_dir, gantry, library, rank_order),
                      container_image=spec.resources.container_image)
    if not spec.command:
        return step
    argv, tasks_per_node = command_argv(spec.launch, spec.command, gantry,
                                        spec.resources.nodes, request.ranks_per_node)
    return dataclasses.replace(step, argv=argv, tasks_per_node=tasks_per_node,
                               rendezvous_argv=(*gantry, "torch-env", "--free-port"))


def script_inputs(request: JobRequest, job_dir: Path, submit_dir: Path,
                  placement: Placement | None = None,
                  gantry: Sequence[str] | None = None,
                  extra_env: Sequence[tuple[str, str]] | None = None,
                  library: Path | None = None) -> ScriptInputs:
    """The template inputs for ``request`` running from ``job_dir``."""
    gantry = tuple(gantry) if gantry is not None else gantry_argv()
    site = request.site.config
    spec = request.spec
    preflight = None
    site_args = ("--site", str(request.site.path))
    placement = placement or Placement()
    # A planned job's gate keeps the planned nodes that pass (spares fill the others' places).
    plan_args = ("--placement", str(job_dir / PLACEMENT_FILE)) if placement.nodes else ()
    if request.preflight_level != "off":
        fabric = ((*gantry, *PREFLIGHT_FABRIC, *site_args)
                  if site.preflight.fabric.enabled else ())
        preflight = PreflightStep(level=request.preflight_level,
                                  check_argv=(*gantry, *PREFLIGHT_CHECK, *site_args),
                                  gate_argv=(*gantry, *PREFLIGHT_GATE, *site_args, *plan_args),
                                  fabric_argv=fabric)
    job_options = tuple(spec.resources.sbatch_options)
    job_names = {option_name(option) for option in job_options}
    site_options = tuple(option for option in site.slurm.sbatch_options
                         if option_name(option) not in job_names)  # the job's replaces it
    if site_options:
        placement = Placement(
            sbatch_options=(*site_options, *placement.sbatch_options),
            summary=placement.summary, nodes=placement.nodes)
    return ScriptInputs(
        job_name=spec.name, job_dir=str(job_dir), submit_dir=str(submit_dir),
        generated_by=f"gantry {launcher.__version__}", spec_file=str(request.spec_path),
        site_name=site.name, layout=layout_line(request), nodes=spec.resources.nodes,
        spares=spec.resources.spares, ranks_per_node=request.ranks_per_node,
        gpus_per_node=request.gpus_per_node, time_limit=spec.resources.time_limit,
        cpus_per_task=spec.resources.cpus_per_task, partition=request.partition,
        account=spec.resources.account, qos=spec.resources.qos,
        dependencies=tuple(spec.resources.dependencies),
        signal_lead_s=spec.policy.signal_lead_s, requeue=spec.policy.requeue,
        max_restarts=spec.policy.max_restarts,
        env=env_pairs(extra_env or (), site.mpi.env,
                      site.nccl.env, spec.env),
        pythonpath=str(root) if (root := import_root()) is not None else None,
        placement=placement, job_options=job_options, preflight=preflight,
        recovery=recovery_step(request, job_dir, gantry, site_args),
        monitor=monitor_step(request, gantry, site_args),
        evict_argv=evict_argv(request, job_dir, gantry, site_args),
        launch=launch_step(request, job_dir, gantry, library, rank_order=bool(placement.nodes)),
    )


def recovery_step(request: JobRequest, job_dir: Path, gantry: Sequence[str],
                  site_args: Sequence[str]) -> RecoveryStep | None:
    """The in-allocation recovery of ``request`` (None when policy.recover_in_allocation is
    off). Replacements pass the job's preflight level, at least quick. A command job's step
    is stopped by step-watch on an eviction (its program cannot act on one)."""
    policy = request.spec.policy
    if not policy.recover_in_allocation:
        return None
    level = request.preflight_level if request.preflight_level != "off" else "quick"
    return RecoveryStep(
        max_recoveries=policy.max_recoveries,
        watch_argv=(*gantry, "step-watch"),
        recover_argv=(*gantry, "recover", *site_args, "--job-dir", str(job_dir),
                      "--level", level),
        stop_on_eviction=bool(request.spec.command),
    )


def monitor_step(request: JobRequest, gantry: Sequence[str],
                 site_args: Sequence[str]) -> MonitorStep | None:
    """The run monitor of ``request``: every policy.monitor_interval_s (else the site's
    preflight.monitor_interval_s) seconds; None when that is 0, or for a command job without
    recovery in the allocation (gantry's trainer acts on an eviction itself; a command's
    step is stopped by step-watch, which only the recovery step runs)."""
    interval = request.spec.policy.monitor_interval_s
    if interval is None:
        interval = request.site.config.preflight.monitor_interval_s
    if not interval or (request.spec.command and not request.spec.policy.recover_in_allocation):
        return None
    return MonitorStep(argv=(*gantry, "monitor", *site_args), interval_s=interval)


def evict_argv(request: JobRequest, job_dir: Path, gantry: Sequence[str],
               site_args: Sequence[str]) -> tuple[str, ...]:
    """`gantry recover` for a node evicted from a job without recovery in the allocation
    (gantry's trainer only: a command writes no rank records and reads no evictions); empty
    when the recovery step handles evictions or the job runs a command."""
    if request.spec.policy.recover_in_allocation or request.spec.command:
        return ()
    return (*gantry, "recover", *site_args, "--job-dir", str(job_dir))  # --no-relaunch: no spare


def template_location(request: JobRequest) -> tuple[str, Path]:
    """(template name, directory) chosen by the site's ``slurm.sbatch_template``."""
    name = request.site.config.slurm.sbatch_template
    candidate = request.site.resolve(name)
    if "/" in name and candidate.is_file():
        return candidate.name, candidate.parent
    return name, TEMPLATE_DIR


def render_job(request: JobRequest, job_dir: Path, submit_dir: Path,
               placement: Placement | None = None, gantry: Sequence[str] | None = None,
               extra_env: Sequence[tuple[str, str]] | None = None,
               library: Path | None = None) -> str:
    """The batch script text of ``request``."""
    name, directory = template_location(request)
    inputs = script_inputs(request, job_dir, submit_dir, placement, gantry, extra_env,
                           library)
    try:
        return render_script(inputs, name, directory)
    except UserInputError as err:  # a job field no #SBATCH line can carry: name its file
        if not str(err).startswith(("resources.", "policy.", "env", "command")):
            raise
        source = spec_source(request.spec_path, request.overrides_used)
        raise UserInputError(f"{source}: {err}") from None
