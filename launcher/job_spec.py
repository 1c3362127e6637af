"""The job spec: one YAML describing a training job (model, parallelism, resources, policy).

Precedence when values come from several places: CLI flags > job YAML > site defaults.
Layout errors name every factor, e.g. ``pp(2) * dp(3) = 6 ranks but 4 nodes x 1 GPU = 4``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from launcher.errors import brief
from launcher.sbatch_options import check_option, option_name
from launcher.schedule_names import Schedule
from launcher.slurm_time import FORMATS, MAX_SECONDS, time_limit_seconds
from launcher.typed_config import FieldError, key_path, load_dataclass

LaunchMode = Literal["per-rank", "torchrun"]
"""How a command job's ranks start (JobSpec.launch)."""
CHUNKED_SCHEDULES = ("interleaved", "zb-interleaved")
"""Schedules with virtual_stages >= 2 chunks per rank (launcher.schedules.CHUNKED)."""
_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
MAX_MICRO_BATCHES = 4096
"""Micro-batches a step at most (as `gantry schedules`): the schedule table grows with them."""

NOT_UTF8 = ("expected UTF-8 text: a byte that is not UTF-8, or a lone surrogate, cannot be "
            "written into the batch script")
"""What a job value that lands in the batch script must be (argv bytes that are not UTF-8
reach Python as lone surrogates, as do YAML "\\udcff" escapes)."""


def is_utf8(text: str) -> bool:
    """True when ``text`` can be written as UTF-8 (it holds no lone surrogate)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


@dataclass(frozen=True)
class ModelSpec:
    """GPT-2-style model size."""

    n_layer: int = 12
    """Transformer blocks."""
    n_head: int = 12
    """Attention heads (n_embd must be divisible by n_head)."""
    n_embd: int = 768
    """Hidden size C."""
    vocab_size: int = 50257
    """Vocabulary size V (the byte-level tokenizer of `gantry data` uses 256 + specials)."""
    seq_len: int = 1024
    """Training sequence length T (also the number of learned positions)."""

    def validate(self) -> None:
        for key in ("n_layer", "n_head", "n_embd", "vocab_size", "seq_len"):
            value = getattr(self, key)
            if value < 1:
                raise FieldError(key, f"{value} is not allowed (expected an integer >= 1)")
        if self.n_embd % self.n_head:
            raise FieldError(
                "n_head",
                f"n_embd({self.n_embd}) is not divisible by n_head({self.n_head})",
            )


@dataclass(frozen=True)
class ParallelismSpec:
    """How the model is split: pp pipeline stages x dp data-parallel replicas."""

    pp: int = 1
    """Pipeline-parallel degree (ranks per pipeline replica)."""
    dp: int = 1
    """Data-parallel degree (pipeline replicas)."""
    schedule: Schedule = "1f1b"
    """Pipeline schedule."""
    micro_batches: int = 1
    """Micro-batches per step per replica (m)."""
    micro_batch_size: int = 1
    """Sequences per micro-batch (B)."""
    virtual_stages: int = 1
    """Model chunks per rank (v) for the interleaved and zb-interleaved schedules; 1 otherwise."""
    stage_layers: list[int] | None = None
    """Layers of each pipeline stage in global stage order (pp * virtual_stages entries,
    each >= 1, summing to model.n_layer); None: the automatic split (launcher/train/split.py)."""

    def validate(self) -> None:
        for key in ("pp", "dp", "micro_batches", "micro_batch_size", "virtual_stages"):
            value = getattr(self, key)
            if value < 1:
                raise FieldError(key, f"{value} is not allowed (expected an integer >= 1)")
        if self.schedule == "interleaved" and self.micro_batches % self.pp:
            raise FieldError("micro_batches", f"{self.micro_batches} is not allowed with schedule "
                             f"'interleaved' (expected a multiple of pp({self.pp}), as Megatron; "
                             "zb-interleaved takes any)")
        if self.micro_batches > MAX_MICRO_BATCHES:
            raise FieldError("micro_batches", f"{self.micro_batches} is not allowed (expected at "
                             f"most {MAX_MICRO_BATCHES} micro-batches a step)")
        if self.stage_layers is not None:
            stages = self.pp * self.virtual_stages
            if len(self.stage_layers) != stages:
                raise FieldError(
                    "stage_layers",
                    f"{self.stage_layers} has {len(self.stage_layers)} entries but "
                    f"pp({self.pp}) * virtual_stages({self.virtual_stages}) = {stages} stages "
                    "(expected one layer count per stage)",
                )
            for index, count in enumerate(self.stage_layers):
                if count < 1:
                    raise FieldError(f"stage_layers[{index}]",
                                     f"{count} is not allowed (expected an integer >= 1)")
        chunked = self.schedule in CHUNKED_SCHEDULES
        if not chunked and self.virtual_stages != 1:
            raise FieldError(
                "virtual_stages",
                f"{self.virtual_stages} needs schedule 'interleaved' or 'zb-interleaved' "
                f"(schedule is {self.schedule!r})",
            )
        if chunked and self.virtual_stages < 2:
            raise FieldError("virtual_stages",
                             f"schedule {self.schedule!r} needs virtual_stages >= 2")


@dataclass(frozen=True)
class TrainSpec:
    """Optimisation settings (AdamW with global-norm clipping)."""

    steps: int = 10
    """Optimizer steps to run."""
    lr: float = 3e-4
    """Peak learning rate."""
    lr_schedule: Literal["constant", "cosine"] = "constant"
    """constant, or linear warmup then cosine decay to min_lr."""
    warmup_steps: int = 0
    """Linear warmup steps (cosine schedule)."""
    min_lr: float = 0.0
    """Final learning rate of the cosine decay."""
    weight_decay: float = 0.1
    """Decoupled weight decay (matrices and embeddings only)."""
    beta1: float = 0.9
    beta2: float = 0.95
    eps: float = 1e-8
    grad_clip: float = 1.0
    """Global gradient-norm clip; 0 disables clipping."""
    seed: int = 1337
    """Seed for weight init and data order."""
    init_weights: str | None = None
    """Safetensors file with Hugging Face GPT-2 names to start from (else random init)."""
    data: str | None = None
    """Glob of uint16 token shards (see `gantry data`); None: synthetic tokens."""

    def validate(self) -> None:
        if self.steps < 1:
            raise FieldError("steps", f"{self.steps} is not allowed (expected >= 1)")
        if self.lr <= 0:
            raise FieldError("lr", f"{self.lr} is not allowed (expected > 0)")
        for key, ok, allowed in (
            ("warmup_steps", self.warmup_steps >= 0, ">= 0"),
            ("min_lr", self.min_lr >= 0, ">= 0"),
            ("weight_decay", self.weight_decay >= 0, ">= 0"),
            ("beta1", 0 <= self.beta1 < 1, "in [0, 1)"),
            ("beta2", 0 <= self.beta2 < 1, "in [0, 1)"),
            ("eps", self.eps > 0, "> 0"),
            ("grad_clip", self.grad_clip >= 0, ">= 0, 0 = no clipping"),
            ("seed", 0 <= self.seed < 2**32, "in 0 .. 2**32 - 1"),
        ):
            if not ok:
                raise FieldError(key, f"{getattr(self, key)} is not allowed (expected {allowed})")


@dataclass(frozen=True)
class CheckpointSpec:
    """Where and how often training state is saved."""

    dir: str | None = None
    """Checkpoint directory (per-stage shards); None disables checkpoints."""
    interval: int = 0
    """Save every N steps (0: only on signal and at the end)."""
    keep: int = 2
    """How many complete checkpoints to keep (0: all)."""
    async_write: bool = False
    """Write shards in a background thread from copies of the buffers, overlapping the next
    step (the manifest follows once every rank's shards are durable). Pays off only where
    the rank has idle cores (see docs/BENCHMARKS.md)."""
    max_lag_steps: int = 1
    """With async_write: how many steps a background write may overlap before the loop waits
    for it (checkpoint N is complete by the end of step N + max_lag_steps; sooner when every
    rank's write is done). Raise it where a shard takes longer to write than a step."""
    pinned_staging: bool = True
    """Copy the buffers into host arrays allocated and page-locked once, at the first save, and
    kept for the run (12 bytes per parameter of the rank's stages: a direct DMA copy, 0.08 s
    for 4.3 GB on an H200 node); false: fresh pageable arrays at every save, freed after it
    (~2 GB/s copies, no memory held between saves)."""

    def validate(self) -> None:
        if self.dir == "":
            raise FieldError("dir", "'' is not allowed (expected a directory, or null for no "
                             "checkpoints)")
        if self.interval < 0:
            raise FieldError("interval", f"{self.interval} is not allowed (expected >= 0)")
        if self.max_lag_steps < 1:
            raise FieldError("max_lag_steps",
                             f"{self.max_lag_steps} is not allowed (expected >= 1)")
        if self.keep < 0:
            raise FieldError("keep", f"{self.keep} is not allowed (expected >= 0, 0 = all)")


@dataclass(frozen=True)
class ResourcesSpec:
    """What to ask Slurm for."""

    nodes: int = 1
    """Nodes that run ranks (spares not included)."""
    spares: int = 0
    """Extra nodes allocated to replace nodes that fail preflight."""
    gpus_per_node: int | None = None
    """Ranks (GPUs) per node; default: the site's gpus_per_node, or 1 on CPU sites. At most
    the site's GPUs per node (its CPUs per node on CPU sites)."""
    cpus_per_task: int | None = None
    """CPUs per rank."""
    time_limit: str = "01:00:00"
    """Slurm time limit, in Slurm's formats: MM, MM:SS, HH:MM:SS, D-HH, D-HH:MM, D-HH:MM:SS
    ("30" is 30 minutes, "00:30" 30 seconds, "1-12" a day and a half)."""
    partition: str | None = None
    """Default: the site's partition."""
    account: str | None = None
    qos: str | None = None
    container_image: str | None = None
    """pyxis --container-image for the training step."""
    dependencies: list[str] = field(default_factory=list)
    """Slurm dependencies, e.g. ["afterok:1234"]."""
    sbatch_options: list[str] = field(default_factory=list)
    """Extra sbatch options for this job, each ``--name`` or ``--name=value``, e.g.
    ["--constraint=a100", "--exclusive", "--mem=64G"]; after the site's slurm.sbatch_options
    (one of the same name replaces the site's). Options that gantry sets itself (--nodes,
    --ntasks-per-node, --time, --job-name, --output, --nodelist, ...) are refused: set their
    job fields. The CLI's --sbatch-option, --constraint, --exclusive, --mem, --hint and --gres
    replace the option of the same name."""

    def validate(self) -> None:
        if self.nodes < 1:
            raise FieldError("nodes", f"{self.nodes} is not allowed (expected >= 1)")
        if self.spares < 0:
            raise FieldError("spares", f"{self.spares} is not allowed (expected >= 0)")
        if self.cpus_per_task is not None and self.cpus_per_task < 1:
            raise FieldError("cpus_per_task", f"{self.cpus_per_task} is not allowed (>= 1)")
        if self.gpus_per_node is not None and self.gpus_per_node < 1:
            raise FieldError("gpus_per_node", f"{self.gpus_per_node} is not allowed (>= 1)")
        for key in ("partition", "account", "qos", "container_image"):
            if getattr(self, key) == "":
                raise FieldError(key, "'' is not allowed (expected a name, or leave it out for "
                                 "the default)")
        if self.container_image is not None and not is_utf8(self.container_image):
            raise FieldError("container_image",
                             f"{brief(self.container_image)} is not allowed ({NOT_UTF8})")
        seen: dict[str, int] = {}
        for index, option in enumerate(self.sbatch_options):
            problem = (f"{brief(option)} is not allowed ({NOT_UTF8})" if not is_utf8(option)
                       else check_option(option))
            if problem is None and option_name(option) in seen:
                problem = (f"{option_name(option)} is given twice (first at "
                           f"sbatch_options[{seen[option_name(option)]}]; give it once)")
            if problem is not None:
                raise FieldError(f"sbatch_options[{index}]", problem)
            seen[option_name(option)] = index
        if time_limit_seconds(self.time_limit) is None:
            raise FieldError(
                "time_limit",
                f"{brief(self.time_limit)} is not allowed (expected Slurm's {FORMATS}, above "
                f"0 and at most {MAX_SECONDS} s; MM:SS is minutes:seconds)")


@dataclass(frozen=True)
class PolicySpec:
    """What happens on failure, preemption and time limit."""

    preflight_level: Literal["off", "quick", "standard", "deep"] | None = None
    """Preflight level of the gate inside the job (None: the site's preflight.level; the CLI's
    --preflight wins)."""
    requeue: bool = True
    """Requeue on preemption, time limit or failed nodes."""
    max_restarts: int = 3
    """Give up after this many restarts."""
    signal_lead_s: int = 120
    """Seconds before the time limit that Slurm sends USR1 (checkpoint then requeue)."""
    hang_timeout_s: float = 300
    """Watchdog: a rank with no progress for this long fails the job into recovery (0: off)."""
    startup_timeout_s: float = 600
    """Watchdog before the first step (MPI/NCCL init, checkpoint load); at least
    hang_timeout_s; off when hang_timeout_s is 0."""
    recover_in_allocation: bool = True
    """After a recoverable step failure, relaunch inside the allocation on healthy spares in
    the failed nodes' places (sbatch --no-kill keeps the allocation); requeue only when no
    healthy spare is left."""
    max_recoveries: int = 3
    """Relaunches inside one allocation before the job requeues (or stops)."""
    monitor_interval_s: float | None = None
    """Seconds between two health samples of the run monitor on each node that runs ranks
    (docs/monitor.md): a FAIL-grade event checkpoints the job and swaps the node for a spare
    (a command job's step is stopped and relaunched on the spare; its monitor runs only with
    recover_in_allocation); 0: no monitor; None: the site's preflight.monitor_interval_s (30 s
    by default)."""
    straggler_action: Literal["warn", "swap", "off"] = "warn"
    """A rank whose compute time stays above straggler_threshold times its reference (the
    median of the ranks running the same stage shape, else the layer split's cost model) over
    straggler_window_steps steps: "warn" records it (stragglers.jsonl, `gantry status`, the
    live view, the report); "swap" also has its node replaced like a failed one; "off": not
    watched."""
    straggler_threshold: float = 1.2
    """Ratio of a rank's compute time to its reference above which it is slow (1.2: 20 %)."""
    straggler_window_steps: int = 10
    """Steps the ratio's median is taken over (after 3 warm-up steps per attempt)."""
    straggler_min_excess_s: float = 0.001
    """Seconds a slow rank's median compute time must also exceed its reference by (below it
    differences are timer and scheduling noise)."""

    def validate(self) -> None:
        if self.max_restarts < 0:
            raise FieldError("max_restarts", f"{self.max_restarts} is not allowed (expected >= 0)")
        if not 0 <= self.signal_lead_s <= 86400:
            raise FieldError("signal_lead_s",
                             f"{self.signal_lead_s} is not allowed (expected 0 .. 86400 s)")
        if self.hang_timeout_s < 0:
            raise FieldError("hang_timeout_s",
                             f"{self.hang_timeout_s} is not allowed (expected >= 0 s, 0 = off)")
        if self.startup_timeout_s < 0:
            raise FieldError("startup_timeout_s",
                             f"{self.startup_timeout_s} is not allowed (expected >= 0 s)")
        if self.monitor_interval_s is not None and not 0 <= self.monitor_interval_s <= 86400:
            raise FieldError("monitor_interval_s", f"{self.monitor_interval_s:g} is not allowed "
                             "(expected seconds 0 .. 86400, 0 = off)")
        if not 0 <= self.max_recoveries <= 1000:
            raise FieldError("max_recoveries",
                             f"{self.max_recoveries} is not allowed (expected 0 .. 1000)")
        if not 1.0 < self.straggler_threshold <= 100.0:
            raise FieldError("straggler_threshold", f"{self.straggler_threshold} is not allowed "
                             "(expected a ratio above 1 and at most 100, e.g. 1.2)")
        if not 1 <= self.straggler_window_steps <= 100_000:
            raise FieldError("straggler_window_steps", f"{self.straggler_window_steps} is not "
                             "allowed (expected 1 .. 100000 steps)")
        if not 0.0 <= self.straggler_min_excess_s <= 3600.0:
            raise FieldError("straggler_min_excess_s", f"{self.straggler_min_excess_s} is not "
                             "allowed (expected 0 .. 3600 s)")


@dataclass(frozen=True)
class JobSpec:
    """A training job. See docs/reference/job-spec.md for every field."""

    name: str
    model: ModelSpec = field(default_factory=ModelSpec)
    parallelism: ParallelismSpec = field(default_factory=ParallelismSpec)
    train: TrainSpec = field(default_factory=TrainSpec)
    resources: ResourcesSpec = field(default_factory=ResourcesSpec)
    checkpoint: CheckpointSpec = field(default_factory=CheckpointSpec)
    policy: PolicySpec = field(default_factory=PolicySpec)
    site: str | None = None
    """Site config path (relative to the job file); the CLI's --site wins."""
    env: dict[str, str] = field(default_factory=dict)
    """Extra environment for every rank (carried literally, never shell-evaluated)."""
    command: list[str] | None = None
    """Run this argv on every rank instead of `gantry train` (custom trainers, tests); each
    argument is carried literally. The CLI's `gantry submit job.yaml -- ARGV...` wins."""
    launch: LaunchMode = "per-rank"
    """How a command job starts: "per-rank", a task per rank (GPU) running the command with
    PyTorch's distributed environment (RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE,
    NODE_RANK, MASTER_ADDR, MASTER_PORT); "torchrun", one torchrun agent per node
    (--nnodes, --nproc-per-node, a c10d rendezvous on the first launch node) that starts
    the node's ranks. Without a command (gantry's trainer) only "per-rank"."""

    def validate(self) -> None:
        if not _NAME_RE.match(self.name):
            raise FieldError(
                "name",
                f"{brief(self.name)} is not allowed (expected 1-64 of A-Z a-z 0-9 . _ -, "
                "starting with a letter or digit)",
            )
        stages = self.parallelism.pp * self.parallelism.virtual_stages
        if stages > self.model.n_layer:
            raise FieldError(
                "parallelism.pp",
                f"pp({self.parallelism.pp}) * virtual_stages({self.parallelism.virtual_stages})"
                f" = {stages} stages but model.n_layer is {self.model.n_layer}",
            )
        counts = self.parallelism.stage_layers
        if counts is not None and sum(counts) != self.model.n_layer:
            raise FieldError(
                "parallelism.stage_layers",
                f"{counts} sums to {sum(counts)} but model.n_layer is {self.model.n_layer} "
                "(expected the layer counts of all stages to add up to it)",
            )
        for key in self.env:
            if not re.match(r"^[A-Za-z_][A-Za-z0-9_]*$", key):
                raise FieldError(key_path("env", key),
                                 "is not a valid environment variable name (expected letters, "
                                 "digits and _, not starting with a digit)")
        for key, value in self.env.items():
            if not is_utf8(value):
                raise FieldError(key_path("env", key), f"{brief(value)} is not allowed "
                                 f"({NOT_UTF8})")
        if self.command is not None and not self.command:
            raise FieldError("command", "[] is not allowed (expected at least the program)")
        for index, arg in enumerate(self.command or ()):
            if not is_utf8(arg):
                raise FieldError(f"command[{index}]", f"{brief(arg)} is not allowed ({NOT_UTF8})")
        if self.launch == "torchrun" and self.command is None:
            raise FieldError("launch", "'torchrun' needs a command (expected 'per-rank' for "
                             "gantry's trainer, or a command: to run under torchrun)")


def check_layout(spec: JobSpec, gpus_per_node: int) -> None:
    """Check pp x dp against the nodes asked for; raise FieldError naming every factor."""
    ranks = spec.parallelism.pp * spec.parallelism.dp
    slots = spec.resources.nodes * gpus_per_node
    if ranks != slots:
        raise FieldError(
            "parallelism",
            f"pp({spec.parallelism.pp}) * dp({spec.parallelism.dp}) = {ranks} ranks but "
            f"{spec.resources.nodes} nodes x {gpus_per_node} GPU = {slots}",
        )


def load_job(path: Path) -> JobSpec:
    """Load and validate a job YAML."""
    return load_dataclass(JobSpec, path)
