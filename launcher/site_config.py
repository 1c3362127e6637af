"""The site config: one YAML per site describing its Slurm, nodes, network, MPI/NCCL and build.

Loaded once into frozen dataclasses (unknown keys and wrong types are errors that name the
field). `site_configs/local.yaml` describes the embedded cluster gantry runs on this host.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar, Literal

from launcher.errors import UserInputError, brief
from launcher.install_paths import data_dir
from launcher.preflight.thresholds import check_threshold_names
from launcher.preflight.xid_actions import XidAction, check_xid_actions
from launcher.typed_config import FieldError, load_dataclass
from topology import hostlists

REPO_ROOT = Path(__file__).resolve().parent.parent
"""The checkout (docs/ lives there: launcher/reference_doc writes it)."""
DEFAULT_SITE = data_dir("site_configs") / "local.yaml"
"""The embedded cluster's site: site_configs/local.yaml as this gantry carries it."""
#: The run dir of a site whose slurm.run_dir is unset (LoadedSite.run_dir).
RUN_DIR_ENV = "GANTRY_RUN_DIR"


_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def _check_env_names(env: dict[str, str]) -> None:
    for key in env:
        if not _ENV_NAME.fullmatch(key):
            raise FieldError(
                "env",
                f"{brief(key)} is not allowed as a variable name (expected letters, digits "
                "and _, not starting with a digit)",
            )


_SLURM_WORD = re.compile(r"[^\s,=#'\"\\]+")


def _check_slurm_word(path: str, value: str, what: str) -> None:
    """A name written into slurm.conf, topology.conf or an sbatch option as one word."""
    if not _SLURM_WORD.fullmatch(value) or not value.isprintable():
        raise FieldError(path, f"{brief(value)} is not allowed (expected {what} without "
                         "blanks, ',', '=', '#', quotes or backslashes)")


MAX_SITE_NAME = 64
"""Longest site name (it names a directory of the build cache, with the build key)."""


def _check_site_name(name: str) -> None:
    """The site name: one Slurm word that can also name a directory (no '/', not '.' first):
    it goes into the build cache path, the generated gantry_site.h and the job scripts."""
    _check_slurm_word("name", name, "one site name")
    if "/" in name or name.startswith(".") or len(name) > MAX_SITE_NAME:
        raise FieldError("name", f"{brief(name)} is not allowed (expected at most "
                         f"{MAX_SITE_NAME} characters, no '/', not starting with '.': the name "
                         "is a directory of the build cache)")


def _expand_field(path: str, expression: str) -> list[str]:
    """hostlists.expand for a config field: its error is the field's (naming the file)."""
    try:
        return hostlists.expand(expression)
    except hostlists.HostlistError as err:
        raise FieldError(path, err.problem) from None


def _first_repeated(names: list[str]) -> str | None:
    seen: set[str] = set()
    for name in names:
        if name in seen:
            return name
        seen.add(name)
    return None


def _check_port(path: str, port: int) -> None:
    if not 1 <= port <= 65535:
        raise FieldError(path, f"{port} is not allowed (expected a port in 1..65535)")


@dataclass(frozen=True)
class SlurmSection:
    """How gantry talks to Slurm and, for an embedded site, how it runs it."""

    embedded: bool = False
    """True when gantry itself starts munged, slurmctld and one slurmd per node on this host."""
    cluster_name: str = "gantry"
    """ClusterName in slurm.conf (one word: no blanks, ',', '=', '#', quotes or backslashes)."""
    partition: str = "batch"
    """Partition jobs are submitted to unless the job says otherwise (one partition, one word
    as cluster_name)."""
    controller_host: str = "localhost"
    """Host running slurmctld."""
    controller_port: int = 16817
    """SlurmctldPort."""
    slurmd_port_base: int = 17001
    """Embedded: node i (1-based, in `nodes.names` order) listens on base + i - 1."""
    run_dir: str | None = None
    """Embedded: directory for all state, logs, pid files and generated configs (relative to
    the site file). Default: $GANTRY_RUN_DIR, else /tmp/gantry-<cluster_name>."""
    client: Literal["auto", "cli", "pyslurm"] = "auto"
    """Slurm client backend: pyslurm when importable and matching the cluster, else the CLI."""
    sbatch_template: str = "train.sbatch.j2"
    """Batch script template: a name in sbatch_templates/, or a path relative to the site file."""
    sbatch_options: list[str] = field(default_factory=list)
    """Extra #SBATCH options for every job of the site, e.g. ["--exclusive"]."""
    slurmd_timeout_s: int = 60
    """Embedded: SlurmdTimeout (a node whose slurmd stops answering is DOWN after this long;
    its jobs are requeued or killed)."""
    cred_expire_s: int | None = None
    """Embedded: AuthInfo cred_expire, the job credential lifetime; a requeued job also waits
    cred_expire + 1 s before it starts again. None: Slurm's default (120 s)."""

    def validate(self) -> None:
        _check_slurm_word("cluster_name", self.cluster_name, "one Slurm cluster name")
        _check_slurm_word("partition", self.partition, "one Slurm partition name")
        _check_port("controller_port", self.controller_port)
        _check_port("slurmd_port_base", self.slurmd_port_base)
        if self.slurmd_timeout_s < 5:
            raise FieldError("slurmd_timeout_s",
                             f"{self.slurmd_timeout_s} is not allowed (expected >= 5 s)")
        if self.cred_expire_s is not None and self.cred_expire_s < 5:
            raise FieldError("cred_expire_s",
                             f"{self.cred_expire_s} is not allowed (expected >= 5 s)")


@dataclass(frozen=True)
class NodesSection:
    """The compute nodes of the site (one homogeneous group)."""

    names: str
    """Slurm hostlist of all compute nodes, e.g. "n[1-8]"."""
    cpus: int = 1
    """CPUs per node (CPUs= in slurm.conf)."""
    real_memory_mb: int = 1000
    """Memory per node in MB (RealMemory= in slurm.conf)."""
    gpus_per_node: int = 0
    """GPUs per node; 0 for CPU-only sites. An embedded cluster gives each node that many
    emulated GPUs in Slurm (Gres=gpu:N; device files linked to /dev/null)."""
    gpu_model: str | None = None
    """GPU model name as the driver reports it, e.g. "NVIDIA H200"."""

    def node_list(self) -> list[str]:
        return hostlists.expand(self.names, "nodes.names")

    def validate(self) -> None:
        names = _expand_field("names", self.names)
        if not names:
            raise FieldError("names", f"{brief(self.names)} names 0 nodes (expected at least 1)")
        twice = _first_repeated(names)
        if twice is not None:
            raise FieldError("names", f"{brief(self.names)} lists node {brief(twice)} twice")
        for key, value, low in (
            ("cpus", self.cpus, 1),
            ("real_memory_mb", self.real_memory_mb, 1),
            ("gpus_per_node", self.gpus_per_node, 0),
        ):
            if value < low:
                raise FieldError(key, f"{value} is not allowed (expected an integer >= {low})")


@dataclass(frozen=True)
class SwitchSpec:
    """One switch of a tree topology: a leaf (with nodes) or an upper switch (with switches)."""

    name: str
    """Switch name (SwitchName= in topology.conf; one word as slurm.cluster_name)."""
    nodes: str | None = None
    """Hostlist of the nodes attached to this (leaf) switch."""
    switches: str | None = None
    """Hostlist of the child switches of this (upper) switch."""


@dataclass(frozen=True)
class BlockSpec:
    """One block of a block topology (Slurm topology/block, 23.11+)."""

    name: str
    """Block name (BlockName= in topology.conf; one word as slurm.cluster_name)."""
    nodes: str
    """Hostlist of the nodes in this block."""


@dataclass(frozen=True)
class TopologySection:
    """The network topology: a switch tree, blocks, or flat (no topology plugin)."""

    plugin: Literal["flat", "tree", "block"] = "flat"
    """Slurm topology plugin: tree (switches), block (23.11+), or flat (none)."""
    switches: list[SwitchSpec] = field(default_factory=list)
    """tree: every switch, leaves and upper tiers, as in Slurm's topology.conf."""
    blocks: list[BlockSpec] = field(default_factory=list)
    """block: every block."""
    block_sizes: list[int] = field(default_factory=list)
    """block: allowed aggregated block sizes (BlockSizes=), empty for Slurm's default."""
    file: str | None = None
    """Instead of switches/blocks: a topology.conf or topology.yaml, relative to the site file."""

    def validate(self) -> None:
        if self.plugin == "tree" and not (self.switches or self.file):
            raise FieldError("switches", "plugin 'tree' needs switches (or a file)")
        if self.plugin == "block" and not (self.blocks or self.file):
            raise FieldError("blocks", "plugin 'block' needs blocks (or a file)")
        block_names = [b.name for b in self.blocks]
        for i, block in enumerate(self.blocks):
            _check_slurm_word(f"blocks[{i}].name", block.name, "one block name")
            if block.name in block_names[:i]:
                raise FieldError(f"blocks[{i}].name", f"{brief(block.name)} is defined twice")
        names = [s.name for s in self.switches]
        for i, name in enumerate(names):
            _check_slurm_word(f"switches[{i}].name", name, "one switch name")
            if name in names[:i]:
                raise FieldError(f"switches[{i}].name", f"{brief(name)} is defined twice")


@dataclass(frozen=True)
class MpiSection:
    """How ranks are launched and which MPI environment they get."""

    launcher: Literal["srun", "mpirun"] = "srun"
    """srun --mpi=<srun_mpi> (default) or mpirun inside the allocation."""
    srun_mpi: str = "pmix"
    """The --mpi plugin for srun."""
    env: dict[str, str] = field(default_factory=dict)
    """Environment for every rank, e.g. OMPI_MCA_btl."""

    def validate(self) -> None:
        _check_env_names(self.env)


@dataclass(frozen=True)
class NcclSection:
    """NCCL settings for GPU sites."""

    env: dict[str, str] = field(default_factory=dict)
    """Environment for every rank, e.g. NCCL_NVLS_ENABLE=0, NCCL_IB_HCA."""

    def validate(self) -> None:
        _check_env_names(self.env)


@dataclass(frozen=True)
class BuildSection:
    """How `gantry build` compiles the native trainer for this site."""

    backend: Literal["cpu", "cuda"] = "cpu"
    """Compute backend of the trainer: cpu (CBLAS + MPI) or cuda (cuBLAS + NCCL)."""
    cuda_archs: list[str] = field(default_factory=list)
    """CUDA architectures, e.g. ["90a"] for H100/H200."""
    blas: Literal["openblas", "none"] = "openblas"
    """CPU BLAS used for the matrix products."""
    cmake_args: list[str] = field(default_factory=list)
    """Extra -D options passed to CMake, e.g. ["-DMPI_HOME=/opt/mpi"]."""
    cudnn_frontend_dir: str | None = None
    """cuda: directory holding cudnn_frontend.h for cuDNN flash attention ($VARS expanded);
    None: the checkout's .deps/cudnn_frontend/include (scripts/fetch_cudnn_frontend.sh) if
    present, else the build uses the reference attention."""

    def validate(self) -> None:
        if self.backend == "cuda" and not self.cuda_archs:
            raise FieldError("cuda_archs", "backend 'cuda' needs at least one architecture")
        for arch in self.cuda_archs:
            if not arch or not arch.isalnum():
                raise FieldError("cuda_archs", f"{brief(arch)} is not allowed (an architecture "
                                 "like '90a' or '80': letters and digits)")


@dataclass(frozen=True)
class FabricSection:
    """The gate's fabric test: after the per-node checks, one rank on every node that passed
    times an all-reduce and two rings of point-to-point transfers (docs/preflight.md)."""

    enabled: bool = True
    """Run the test in a job's gate (with at least 2 nodes that passed the node checks)."""
    backend: Literal["auto", "mpi", "nccl"] = "auto"
    """mpi: mpi4py on host memory; nccl: torch.distributed NCCL on GPU 0 of each node (MPI
    only passes the rendezvous and the results); auto: nccl when nodes.gpus_per_node > 0."""
    bytes: int = 1 << 20
    """Bytes of the all-reduce and of each point-to-point transfer (1 KiB..16 GiB)."""
    repeats: int = 3
    """Timed repetitions of the all-reduce and of each link, after one warm-up; the median
    counts (1..50)."""
    slow_link_ratio: float = 4.0
    """A link is slow when its time exceeds this many times the reference link time (the
    median over nodes of each node's fastest link) ..."""
    slow_link_excess_ms: float = 50.0
    """... and exceeds it by at least this many milliseconds (the noise floor: on a GPU
    fabric with large transfers a few ms; on the embedded cluster tens)."""
    min_link_gbps: float = 0.0
    """A link below this bandwidth (bytes / its time) is slow whatever the others do
    (0: not checked); the only judgement of a 2-node test."""
    min_busbw_gbps: float = 0.0
    """The all-reduce bus bandwidth below which the fabric fails (0: not checked)."""
    timeout_s: float = 120.0
    """Each rank exits (the test gives no result) after this long."""

    def validate(self) -> None:
        if not 1 << 10 <= self.bytes <= 16 << 30:
            raise FieldError("bytes", f"{self.bytes} is not allowed (expected 1024..{16 << 30})")
        if not 1 <= self.repeats <= 50:
            raise FieldError("repeats", f"{self.repeats} is not allowed (expected 1..50)")
        if not self.slow_link_ratio > 1.0:
            raise FieldError("slow_link_ratio",
                             f"{self.slow_link_ratio} is not allowed (expected a number > 1)")
        for name in ("slow_link_excess_ms", "min_link_gbps", "min_busbw_gbps"):
            value = getattr(self, name)
            if not 0.0 <= value < float("inf"):
                raise FieldError(name, f"{value} is not allowed (expected a number >= 0)")
        if not 1.0 <= self.timeout_s <= 3600.0:
            raise FieldError("timeout_s",
                             f"{self.timeout_s} is not allowed (expected seconds in 1..3600)")


@dataclass(frozen=True)
class PreflightSection:
    """Per-site preflight settings: level, thresholds, what to check, how to drain."""

    REPLACED_KEYS: ClassVar[dict[str, str]] = {
        "xid_fail_codes": "xid_actions, a map of Xid code -> drain, reset, warn or ignore "
                          "(e.g. {48: reset, 79: drain}; docs/monitor.md)"}
    """Keys of older gantry releases -> what took their place (named in the error)."""

    level: Literal["quick", "standard", "deep"] = "quick"
    """Preflight level when none is asked for: of `gantry preflight`, of the Slurm plugin
    suite, and of a job's gate when the job sets no policy.preflight_level (nor --preflight)."""
    thresholds: dict[str, float] = field(default_factory=dict)
    """Overrides of the default thresholds, by name (see docs/preflight.md)."""
    drain: bool = True
    """Drain nodes that fail (with a `gantry:` reason)."""
    driver_version: str | None = None
    """Required GPU driver version (None: any, but all GPUs must agree)."""
    disk_paths: list[str] = field(default_factory=lambda: ["/tmp"])
    """Directories whose free space is checked (checkpoint, scratch); $VARS are expanded."""
    required_mounts: list[str] = field(default_factory=list)
    """Mount points that must be mounted (e.g. /scratch, /home)."""
    xid_actions: dict[int, XidAction] = field(default_factory=dict)
    """What an Xid calls for, by code, merged onto gantry's table from NVIDIA's catalogue
    (launcher/preflight/xid_actions.py; docs/monitor.md lists it): drain or reset (a FAIL:
    preflight drains the node, the run monitor evicts it), warn, or ignore; a code in
    neither table warns. Used by preflight's gpu.xid and the run monitor alike."""
    monitor_interval_s: float = 30.0
    """Seconds between two samples of the run monitor (`gantry monitor`, one per node that
    runs ranks, docs/monitor.md) when the job sets no policy.monitor_interval_s; 0: off."""
    state_dir: str | None = None
    """Where drain history and counter baselines live (shared by all nodes on real sites):
    written by its owner (root's Slurm scripts), read by jobs; not used when others may write
    it (docs/preflight.md). ~ and $VARS are expanded, then a relative path resolves against
    the site file. Default: $GANTRY_STATE_DIR, else <run dir>/preflight (see slurm.run_dir)."""
    resume_after_passes: int = 3
    """Resume a node gantry drained after this many consecutive clean runs."""
    max_drain_fraction: float = 0.1
    """Never drain more than this fraction of the cluster (at least 1 node) per window."""
    drain_window_s: int = 3600
    """The rate-limit window in seconds."""
    gate_timeout_s: float = 300.0
    """How long the gate waits for all nodes' verdicts."""
    fabric: FabricSection = field(default_factory=FabricSection)
    """The fabric test across the nodes that passed, in a job's gate."""

    def validate(self) -> None:
        check_threshold_names(self.thresholds)
        if (problem := check_xid_actions(self.xid_actions)) is not None:
            raise FieldError("xid_actions", problem)
        if not 0 <= self.monitor_interval_s <= 86400:
            raise FieldError("monitor_interval_s", f"{self.monitor_interval_s:g} is not allowed "
                             "(expected seconds 0 .. 86400, 0 = off)")
        if self.resume_after_passes < 1:
            raise FieldError(
                "resume_after_passes",
                f"{self.resume_after_passes} is not allowed (expected an integer >= 1)",
            )
        if not 0.0 < self.max_drain_fraction <= 1.0:
            raise FieldError(
                "max_drain_fraction",
                f"{self.max_drain_fraction} is not allowed (expected a number in (0, 1])",
            )
        if self.drain_window_s < 0:
            raise FieldError(
                "drain_window_s", f"{self.drain_window_s} is not allowed (expected >= 0)"
            )


def check_env_mapping(path: str, env: dict[str, str]) -> None:
    """Variable names as for mpi.env, and one-line values: such entries can be written to
    the KEY=VALUE files the Slurm plugins read."""
    for key, value in env.items():
        if not _ENV_NAME.fullmatch(key):
            raise FieldError(
                path,
                f"{brief(key)} is not allowed as a variable name (expected letters, digits "
                "and _, not starting with a digit)",
            )
        if "\n" in value or "\r" in value or "\0" in value:
            raise FieldError(f"{path}.{key}", f"{brief(value)} is not allowed (expected one line)")


@dataclass(frozen=True)
class PluginsSection:
    """gantry's Slurm plugin suite on this site, written by `gantry site install-plugins`:
    the SPANK plugin (--gantry-preflight, --gantry-env), Prolog/Epilog/HealthCheckProgram."""

    enabled: bool = False
    """Install the suite; an embedded cluster then loads it (PlugStackConfig=, Prolog=, ...)."""
    prefix: str | None = None
    """Install directory (relative to the site file). Default: <run dir>/plugins for an
    embedded site; a real site passes --prefix or sets this."""
    spank: bool = True
    """Build the SPANK plugin and write plugstack.conf."""
    prolog: bool = True
    """Prolog= runs `gantry preflight --drain` before every job."""
    epilog: bool = True
    """Epilog= runs a quick `gantry preflight --drain` after every job."""
    health_check: bool = True
    """HealthCheckProgram= runs a quick `gantry preflight --drain` periodically."""
    health_check_interval_s: int = 300
    """HealthCheckInterval= in seconds."""
    preflight_timeout_s: int = 120
    """The SPANK plugin's watchdog on `gantry preflight` (1..3600 s)."""
    preflight_env: dict[str, str] = field(default_factory=dict)
    """Extra environment for the node checks the suite runs, e.g. tool paths
    (GANTRY_NVIDIA_SMI=/opt/nvidia/bin/nvidia-smi); never the user's job environment."""

    def validate(self) -> None:
        if not 1 <= self.preflight_timeout_s <= 3600:
            raise FieldError(
                "preflight_timeout_s",
                f"{self.preflight_timeout_s} is not allowed (expected seconds in 1..3600)",
            )
        if self.health_check_interval_s < 1:
            raise FieldError(
                "health_check_interval_s",
                f"{self.health_check_interval_s} is not allowed (expected seconds >= 1)",
            )
        check_env_mapping("preflight_env", self.preflight_env)


@dataclass(frozen=True)
class MetricsSection:
    """The run's metrics for the site's monitoring (Prometheus) and the figures `gantry
    report` needs from the site (docs/goodput.md)."""

    textfile_dir: str | None = None
    """node-exporter's textfile collector directory (--collector.textfile.directory):
    `gantry metrics JOB` writes one gantry_<job>_<node>.prom file per node there when given
    no --textfile-dir. ~ and $VARS are expanded, then a relative path resolves against the
    site file. None: no default directory."""
    gpu_peak_tflops: float | None = None
    """Peak dense bf16 TFLOP/s of one GPU, for the report's MFU on a GPU site. None: the
    datasheet figure of nodes.gpu_model when gantry knows the model (A100, H100, H200,
    B200), else no MFU."""
    node_mtbf_h: float | None = None
    """Mean hours between failures of one node, for the report's suggested checkpoint
    interval before the job saw a failure of its own (the job's MTBF is this / its nodes).
    None: no suggestion until a failure is seen."""

    def validate(self) -> None:
        for key in ("gpu_peak_tflops", "node_mtbf_h"):
            value = getattr(self, key)
            if value is not None and not (value > 0 and value < float("inf")):
                raise FieldError(key, f"{value} is not allowed (expected a number > 0)")
        if self.textfile_dir is not None and not self.textfile_dir.strip():
            raise FieldError("textfile_dir", "an empty path is not allowed (expected a "
                             "directory, or leave it unset)")


@dataclass(frozen=True)
class SiteConfig:
    """A whole site. See docs/reference/site-config.md for every field."""

    name: str
    """Site name (names the build cache entry and the job scripts' header): one word as
    slurm.cluster_name, at most 64 characters, no '/', not starting with '.'."""
    nodes: NodesSection
    """The compute nodes."""
    description: str = ""
    """One line for humans."""
    slurm: SlurmSection = field(default_factory=SlurmSection)
    """Slurm: client, partition, embedded cluster settings."""
    topology: TopologySection = field(default_factory=TopologySection)
    """Network topology used by placement (and Slurm's topology plugin)."""
    mpi: MpiSection = field(default_factory=MpiSection)
    """Rank launch and MPI environment."""
    nccl: NcclSection = field(default_factory=NcclSection)
    """NCCL environment (GPU sites)."""
    build: BuildSection = field(default_factory=BuildSection)
    """How the native trainer is compiled for the site."""
    preflight: PreflightSection = field(default_factory=PreflightSection)
    """Node health checks and the drain policy."""
    plugins: PluginsSection = field(default_factory=PluginsSection)
    """The Slurm plugin suite (SPANK, Prolog/Epilog, HealthCheckProgram)."""
    metrics: MetricsSection = field(default_factory=MetricsSection)
    """Metrics out (Prometheus textfiles) and the report's MFU and checkpoint advice."""

    def validate(self) -> None:
        _check_site_name(self.name)
        known = set(self.nodes.node_list())
        switch_names = {s.name for s in self.topology.switches}
        for i, switch in enumerate(self.topology.switches):
            if switch.nodes:
                for node in _expand_field(f"topology.switches[{i}].nodes", switch.nodes):
                    if node not in known:
                        raise FieldError(
                            f"topology.switches[{i}].nodes",
                            f"{brief(node)} is not one of nodes.names ({brief(self.nodes.names)})",
                        )
            if switch.switches:
                where = f"topology.switches[{i}].switches"
                for child in _expand_field(where, switch.switches):
                    if child not in switch_names:
                        raise FieldError(where, f"{brief(child)} is not a defined switch")
        for i, block in enumerate(self.topology.blocks):
            for node in _expand_field(f"topology.blocks[{i}].nodes", block.nodes):
                if node not in known:
                    raise FieldError(
                        f"topology.blocks[{i}].nodes",
                        f"{brief(node)} is not one of nodes.names ({brief(self.nodes.names)})",
                    )


@dataclass(frozen=True)
class LoadedSite:
    """A site config together with the file it came from (relative paths resolve there)."""

    config: SiteConfig
    path: Path
    """The site file (absolute)."""

    def resolve(self, relative: str) -> Path:
        """A path the site file names: relative ones resolve against its directory, whatever
        the current directory."""
        candidate = Path(relative)
        return candidate if candidate.is_absolute() else self.path.parent / candidate

    def run_dir(self, env: Mapping[str, str] | None = None) -> Path:
        """The site's run dir (absolute): slurm.run_dir (relative to the site file), else
        $GANTRY_RUN_DIR, else /tmp/gantry-<cluster_name>. The embedded cluster keeps all its
        files there; the preflight state dir defaults to <run dir>/preflight."""
        environ = os.environ if env is None else env
        configured = self.config.slurm.run_dir
        if configured:
            return self.resolve(configured).resolve()
        if environ.get(RUN_DIR_ENV):
            return Path(environ[RUN_DIR_ENV]).resolve()
        return Path("/tmp") / f"gantry-{self.config.slurm.cluster_name}"


def load_site(path: Path | None = None) -> LoadedSite:
    """Load and validate a site config (default: site_configs/local.yaml)."""
    try:
        site_path = (path or DEFAULT_SITE).resolve()
    except (OSError, RuntimeError) as err:  # a link loop
        raise UserInputError(f"{path}: cannot resolve ({err})") from None
    return LoadedSite(config=load_dataclass(SiteConfig, site_path), path=site_path)
