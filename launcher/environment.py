"""Every ``GANTRY_*`` environment variable gantry reads or sets, outside the native library's
runtime switches (those are ``launcher/native/runtime_config.py``'s ``SWITCHES``): name,
default, meaning and who reads or sets it. docs/reference/environment.md is generated from
this table and the switches; tests/unit/test_environment_registry.py greps the sources for
``GANTRY_*`` names and fails on one that is in neither, and on an entry no source names.
``NOT_ENVIRONMENT`` lists the ``GANTRY_*`` names of the sources that are not environment
variables (C macros, CMake options)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Variable:
    """One environment variable."""

    name: str
    default: str
    """What applies when it is unset, in words."""
    meaning: str
    reader: str
    """The code that reads it (or, for one gantry sets, the code that sets it)."""


TOOLS = "Tool paths"
ROOTS = "Directories"
SET_BY_GANTRY = "Set by gantry"
FAULTS = "Fault injection (tests)"

GROUPS: tuple[tuple[str, str], ...] = (
    (TOOLS, "Where gantry finds the programs it runs, by one rule for every tool "
            "(launcher/slurm/tools.py): `GANTRY_<TOOL>` (upper case, `-` as `_`), else, for "
            "Slurm's programs, `$GANTRY_SLURM_BIN_DIR/<tool>`, else PATH (for Slurm's and "
            "munge's programs then /usr/sbin, /usr/bin, /usr/local/sbin, /usr/local/bin). An "
            "empty value counts as unset. Every Slurm and munge program runs through the one "
            "runner, launcher/slurm/runner.py. Tests inject faults through the same overrides "
            "(a recorded nvidia-smi, say)."),
    (ROOTS, "Where gantry keeps or finds its files."),
    (SET_BY_GANTRY, "Set by gantry in the environment of what it starts; read by gantry's "
                    "own processes there (a user may read them too)."),
    (FAULTS, "Read by every rank of `gantry train` (the fabric hook: of the gate's fabric "
             "test), for the recovery and gate tests; real jobs never "
             "set them. A hook that names a step fires once per job (a marker file in the "
             "state dir); a malformed value is a one-line error naming the variable."),
)
"""(group, what its variables have in common), in page order."""

_RULE = "the tool rule (launcher/slurm/tools.py)"
_SLURM = "$GANTRY_SLURM_BIN_DIR/{0}, else {0} on PATH or in /usr/sbin, /usr/bin, ..."
_PREFLIGHT = "preflight (launcher/preflight/tools.py)"
_FAULT_HOOKS = "every rank (launcher/train/faults.py)"

VARIABLES: dict[str, tuple[Variable, ...]] = {
    TOOLS: (
        Variable("GANTRY_NVIDIA_SMI", "nvidia-smi on PATH",
                 "nvidia-smi to run; when set, preflight reads GPUs through it, not NVML",
                 f"preflight (launcher/preflight/gpu_collect.py) by {_RULE}; the SPANK "
                 "plugin's preflight_env file may set it"),
        Variable("GANTRY_GPU_SOURCE", "`auto`",
                 "GPU facts from `nvml`, `nvidia-smi` or `auto` (NVML where it loads, else "
                 "nvidia-smi on PATH)", "preflight (launcher/preflight/gpu_collect.py)"),
        Variable("GANTRY_DMESG", "dmesg on PATH", "dmesg to run for the kernel log's Xid events",
                 f"preflight (launcher/preflight/kernel_log.py) by {_RULE}"),
        Variable("GANTRY_SCONTROL", _SLURM.format("scontrol"),
                 "scontrol to run (preflight's drain and node reads, the Slurm client, the "
                 "embedded cluster, `gantry site check`)", _RULE),
        Variable("GANTRY_SINFO", _SLURM.format("sinfo"),
                 "sinfo to run (node reads of Slurm 22.05, the embedded cluster, `gantry "
                 "plan`)", _RULE),
        Variable("GANTRY_SQUEUE", _SLURM.format("squeue"),
                 "squeue to run (the Slurm client, the embedded cluster)", _RULE),
        Variable("GANTRY_SRUN", _SLURM.format("srun"),
                 "srun the preflight gate runs on every node",
                 f"the gate (launcher/preflight/gate.py) by {_RULE}"),
        Variable("GANTRY_MPIRUN", "mpirun on PATH",
                 "mpirun of the active preflight check `mpi.ping`",
                 f"preflight (launcher/preflight/active_checks.py) by {_RULE}"),
        Variable("GANTRY_SCANCEL", _SLURM.format("scancel"),
                 "scancel to run (the Slurm client; the embedded cluster when it stops)",
                 _RULE),
        Variable("GANTRY_SLURMCTLD", _SLURM.format("slurmctld"),
                 "slurmctld the embedded cluster starts", _RULE),
        Variable("GANTRY_SLURMD", _SLURM.format("slurmd"),
                 "slurmd the embedded cluster starts (and asks for the Slurm version)",
                 _RULE),
        Variable("GANTRY_MUNGED", "munged on PATH or in /usr/sbin, /usr/bin, ...",
                 "munged the embedded cluster starts", _RULE),
        Variable("GANTRY_SLURM_BIN_DIR", "PATH",
                 "directory holding Slurm's programs (sbatch, squeue, scontrol, srun, "
                 "slurmd, ...): each one without a `GANTRY_<TOOL>` of its own is taken from "
                 "there, as it is (a program missing there is missing)", _RULE),
        Variable("GANTRY_CMAKE", "cmake on PATH", "cmake of `gantry build` and of the SPANK "
                 "plugin's build (CC and NVCC choose the compilers)", "launcher/cmake.py"),
    ),
    ROOTS: (
        Variable("GANTRY_JOBS_DIR", "`./gantry-jobs`",
                 "root of the job directories (the CLI's --jobs-dir wins)",
                 "launcher/job_dir.py"),
        Variable("GANTRY_RUN_DIR", "/tmp/gantry-<cluster_name>",
                 "a site's run directory when its `slurm.run_dir` is not set",
                 "launcher/site_config.py, launcher/cluster/layout.py"),
        Variable("GANTRY_STATE_DIR", "<run dir>/preflight",
                 "preflight's state directory when the site's `preflight.state_dir` is not "
                 "set", "launcher/preflight/state.py"),
        Variable("GANTRY_BUILD_CACHE", "`~/.cache/gantry/build`",
                 "root of `gantry build`'s per-site build cache and of the zb-interleaved "
                 "search's compiled loops (`schedules-<key>/`)",
                 "launcher/build.py, launcher/schedules/native.py"),
        Variable("GANTRY_NATIVE_LIB", "`native/build/libgantry_native.so`",
                 "native library `gantry train` loads (its --lib wins)",
                 "launcher/native/binding.py"),
        Variable("GANTRY_SYSFS_ROOT", "`/sys`",
                 "root of the sysfs tree preflight reads (InfiniBand ports); a subdirectory "
                 "named `$SLURMD_NODENAME` under it wins, so one test node can carry a fault",
                 "preflight (launcher/preflight/tools.py); the demo sets it"),
        Variable("GANTRY_PROC_ROOT", "`/proc`", "root of the procfs tree preflight reads",
                 _PREFLIGHT),
    ),
    SET_BY_GANTRY: (
        Variable("GANTRY_JOB_DIR", "unset: nothing cached, no fault markers",
                 "the job directory, exported by the batch script; the schedule cache and "
                 "the fault markers live under it",
                 "set by sbatch_templates/train.sbatch.j2; read by "
                 "launcher/train/schedule_cache.py, launcher/train/faults.py"),
        Variable("GANTRY_ATTEMPT_DIR", "unset: no stop-signal file",
                 "this attempt's directory (runs/<jobid>-<restart>[.<k>] of the job "
                 "directory), exported by the batch script; the trainer writes the signal it "
                 "stopped on there, each rank its start, heartbeat and exit records "
                 "(ranks/), the watchdog its hang.json",
                 "set by sbatch_templates/train.sbatch.j2; read by launcher/train/trainer.py, "
                 "launcher/train/rank_records.py, launcher/train/watchdog.py"),
        Variable("GANTRY_TASK_ID", "-",
                 "in a command job's ranks: the launcher's task number of this rank (what "
                 "`srun --label` prints), beside RANK, WORLD_SIZE, LOCAL_RANK and NODE_RANK",
                 "set by `gantry torch-env` (launcher/torch_env.py)"),
        Variable("GANTRY_NODE_NAME", "the host name",
                 "a rank's node name where SLURMD_NODENAME is unset (mpirun outside Slurm)",
                 "launcher/train/layout.py"),
        Variable("GANTRY_CLUSTER_RUN_DIR", "-",
                 "the run dir, in every embedded-cluster daemon's environment: `gantry "
                 "cluster down` finds the processes they spawned by it",
                 "set and read by launcher/cluster/lifecycle.py"),
        Variable("GANTRY_ENV_SITE", "-",
                 "the site whose env file `--gantry-env` applied to the step's tasks",
                 "set by the SPANK plugin (native/spank/gantry_spank.c)"),
    ),
    FAULTS: (
        Variable("GANTRY_FAULT_HANG", "unset: off",
                 "`STEP[:RANK]`: the rank (default: the last) stops itself (SIGSTOP) before "
                 "step STEP, like a peer gone mid-collective", _FAULT_HOOKS),
        Variable("GANTRY_FAULT_KILL", "unset: off",
                 "`STEP[:RANK]`: the rank (default: the last) kills itself (SIGKILL) before "
                 "step STEP: a rank crashing on a healthy node, leaving no exit record",
                 _FAULT_HOOKS),
        Variable("GANTRY_FAULT_CRASH_IN_CHECKPOINT", "unset: off",
                 "`STEP[:RANK]`: the rank (default: every writing rank that gets there "
                 "first) exits half-way through writing its shard of checkpoint STEP",
                 _FAULT_HOOKS),
        Variable("GANTRY_FAULT_STEP_DELAY_S", "unset: off",
                 "`SECONDS`: every rank sleeps this long after each step", _FAULT_HOOKS),
        Variable("GANTRY_FAULT_SLOW_CHECKPOINT_S", "unset: off",
                 "`SECONDS`: every shard write sleeps this long before it writes",
                 _FAULT_HOOKS),
        Variable("GANTRY_FAULT_SLOW_NODE", "unset: off",
                 "`NODE:SECONDS`: every rank on node NODE sleeps SECONDS before each step and "
                 "adds them to the compute time it records (a straggler)", _FAULT_HOOKS),
        Variable("GANTRY_FAULT_SLOW_FABRIC", "unset: off",
                 "`NODE:SECONDS`: the gate's fabric test rank on NODE sleeps this long before "
                 "each transfer it takes part in (a slow node); fires on every test",
                 "every rank of `gantry preflight fabric` (launcher/preflight/fabric_fault.py)"),
        Variable("GANTRY_FAULT_STATE_DIR", "`$GANTRY_JOB_DIR`; neither: hooks fire every time",
                 "directory of the fired-once markers", _FAULT_HOOKS),
    ),
}
"""Group -> its variables, in page order."""

NOT_ENVIRONMENT: dict[str, str] = {
    "GANTRY_BACKEND": "CMake option of native/ (cpu or cuda), set by `gantry build`",
    "GANTRY_CUDA_ARCHS": "CMake option: the GPU architectures, set by `gantry build`",
    "GANTRY_CUDNN": "CMake option: build cuDNN attention (ON/OFF)",
    "GANTRY_CUDNN_FRONTEND_DIR": "CMake option: the cudnn-frontend headers",
    "GANTRY_SITE_INCLUDE_DIR": "CMake option: the directory of the generated gantry_site.h",
    "GANTRY_SITE_NAME": "C macro of the generated gantry_site.h",
    "GANTRY_SITE_GPUS_PER_NODE": "C macro of the generated gantry_site.h",
    "GANTRY_SITE_NODES": "C macro of the generated gantry_site.h",
    "GANTRY_SITE_BACKEND_": "C macro prefix of the generated gantry_site.h",
    "GANTRY_HAVE_CUDNN": "C macro: the build has cuDNN attention",
    "GANTRY_EXPORT": "C macro of the SPANK plugin: symbol visibility",
}
"""``GANTRY_*`` names of the sources that are not environment variables (include guards,
``GANTRY_..._H``, aside)."""


def all_variables() -> list[Variable]:
    """Every variable of every group, in page order."""
    return [v for group, _ in GROUPS for v in VARIABLES[group]]
