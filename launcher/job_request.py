"""Resolves a job request: job YAML + site config + CLI flags -> one fully-resolved JobRequest.

This is the one place precedence is decided: CLI flags > job YAML > site defaults. Errors
name the file (or the flag), the field, the value and what is allowed; nothing is created
or submitted before resolution succeeds.
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from launcher.errors import UserInputError, brief
from launcher.job_spec import NOT_UTF8, JobSpec, ParallelismSpec, check_layout, is_utf8
from launcher.sbatch_options import merge_options
from launcher.site_config import LoadedSite, SiteConfig, load_site
from launcher.typed_config import FieldError, from_mapping, load_yaml_file


@dataclass(frozen=True)
class Flag:
    """How one CliOverrides field is given on the command line and where it lands."""

    flag: str
    """The option, e.g. "--gpus-per-node"."""
    help: str
    """Its --help text."""
    section: str | None
    """The job mapping's section it sets (None: top level)."""
    key: str
    """The key in that section."""
    choices: tuple[str, ...] = ()
    """The values allowed (argparse checks them)."""
    metavar: str | None = None
    short: str | None = None
    """Slurm's short form of the option, e.g. "-N" (an alias)."""
    sbatch: str | None = None
    """The sbatch option it adds to resources.sbatch_options (a first-class sbatch flag,
    e.g. "--mem": ``--mem 64G`` adds "--mem=64G", replacing the job file's --mem)."""


def _flag(flag: str, help: str, section: str | None, key: str, default: Any = None,
          choices: tuple[str, ...] = (), metavar: str | None = None,
          short: str | None = None) -> Any:
    return field(default=default, metadata={"flag": Flag(flag, help, section, key, choices,
                                                          metavar, short)})


def _sbatch_flag(option: str, help: str, metavar: str | None = None,
                 short: str | None = None) -> Any:
    flag = Flag(option, help, "resources", "sbatch_options", metavar=metavar, short=short,
                sbatch=option)
    return field(default=None, metadata={"flag": flag})


@dataclass(frozen=True)
class CliOverrides:
    """Job fields given on the command line; None means "not given" (the YAML decides).

    The one table of the overrides: each field's :class:`Flag` (in ``metadata["flag"]``)
    gives its option, help, and the job field it sets; the argument parser
    (launcher/job_cli.py), :meth:`from_values`, :meth:`check_text` and :meth:`apply` all
    read it. A tuple field is repeatable and adds to the YAML's list or mapping."""

    name: str | None = _flag("--name", "job name", None, "name", short="-J")
    nodes: int | None = _flag("--nodes", "nodes that run ranks", "resources", "nodes",
                              short="-N")
    spares: int | None = _flag("--spares", "extra nodes for preflight replacements",
                               "resources", "spares")
    gpus_per_node: int | None = _flag("--gpus-per-node", "ranks (GPUs) per node",
                                      "resources", "gpus_per_node")
    cpus_per_task: int | None = _flag("--cpus-per-task", "CPUs per rank", "resources",
                                      "cpus_per_task", short="-c")
    time_limit: str | None = _flag("--time", "time limit (MM, MM:SS, HH:MM:SS, D-HH[:MM[:SS]])",
                                   "resources", "time_limit", short="-t")
    partition: str | None = _flag("--partition", "partition", "resources", "partition",
                                  short="-p")
    account: str | None = _flag("--account", "account", "resources", "account", short="-A")
    qos: str | None = _flag("--qos", "QOS", "resources", "qos", short="-q")
    constraint: str | None = _sbatch_flag("--constraint", "Slurm node features, e.g. a100",
                                          short="-C")
    exclusive: bool | None = _sbatch_flag("--exclusive", "nodes not shared with other jobs")
    mem: str | None = _sbatch_flag("--mem", "memory per node, e.g. 64G")
    hint: str | None = _sbatch_flag("--hint", "Slurm task binding hint, e.g. nomultithread")
    gres: str | None = _sbatch_flag("--gres", "generic resources other than GPUs")
    container_image: str | None = _flag(
        "--container-image", "pyxis container image for the training step", "resources",
        "container_image")
    dependencies: tuple[str, ...] = _flag(
        "--dependency", "Slurm dependency, e.g. afterok:123 (repeatable)", "resources",
        "dependencies", default=(), metavar="DEP", short="-d")
    sbatch_options: tuple[str, ...] = _flag(
        "--sbatch-option", "an sbatch option for this job, e.g. --sbatch-option=--mem=64G "
        "(repeatable; replaces the job file's option of that name)", "resources",
        "sbatch_options", default=(), metavar="--OPT[=VALUE]")
    env: tuple[str, ...] = _flag(
        "--env", "environment for every rank (repeatable; carried literally)", None, "env",
        default=(), metavar="KEY=VALUE")
    preflight_level: str | None = _flag("--preflight", "preflight level", "policy",
                                        "preflight_level",
                                        choices=("off", "quick", "standard", "deep"))
    launch: str | None = _flag("--launch", "how a command job's ranks start: a task per rank "
                               "with PyTorch's environment, or a torchrun agent per node",
                               None, "launch", choices=("per-rank", "torchrun"))
    command: tuple[str, ...] = ()
    """Arguments after `--`: run this argv on every rank instead of `gantry train`."""

    @staticmethod
    def flags() -> list[tuple[str, Flag]]:
        """(field name, its Flag) of every override given by an option, in --help order."""
        return [(f.name, f.metadata["flag"]) for f in fields(CliOverrides)
                if "flag" in f.metadata]

    @classmethod
    def from_values(cls, values: dict[str, Any], command: Sequence[str] = ()) -> CliOverrides:
        """The overrides from parsed options (field name -> value; lists for repeatables)."""
        repeatable = {f.name for f in fields(cls) if f.default == ()}
        given: dict[str, Any] = {
            name: tuple(values[name] or ()) if name in repeatable else values[name]
            for name, _ in cls.flags()}
        return cls(**given, command=tuple(command))

    def _given(self) -> list[tuple[Flag, Any]]:
        """(Flag, value) of each option set: single values first, then repeatable ones (the
        order of the flags-used record)."""
        pairs = [(flag, getattr(self, name)) for name, flag in self.flags()]
        return ([(f, v) for f, v in pairs if not isinstance(v, tuple) and v is not None]
                + [(f, v) for f, v in pairs if isinstance(v, tuple) and v])

    def check_text(self) -> None:
        """Every text flag is UTF-8: argv bytes that are not reach Python as lone surrogates,
        which no batch script can hold; UserInputError naming the flag otherwise."""
        values = [(flag.flag, v) for flag, value in self._given()
                  for v in (value if isinstance(value, tuple) else (value,))]
        for flag, value in [*values, *(("-- COMMAND", c) for c in self.command)]:
            if isinstance(value, str) and not is_utf8(value):
                raise UserInputError(f"{flag}: {brief(value)} is not allowed ({NOT_UTF8})")

    def apply(self, raw: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
        """``raw`` (the job YAML mapping) with the overrides set; also the flags used."""
        self.check_text()
        data = copy.deepcopy(raw)
        used: list[str] = []
        for flag, value in self._given():
            target = data if flag.section is None else data.setdefault(flag.section, {})
            if not isinstance(target, dict):
                raise UserInputError(f"{flag.flag}: cannot override {flag.section}.{flag.key} "
                                     f"({flag.section} in the job file is not a mapping)")
            if flag.key == "env":
                target[flag.key] = {**dict(target.get(flag.key) or {}), **_env_pairs(value)}
            elif flag.key == "sbatch_options":
                option = flag.sbatch
                options = value if option is None else (
                    (option,) if value is True else (f"{option}={value}",))
                target[flag.key] = merge_options(target.get(flag.key) or [], options)
            elif isinstance(value, tuple):
                target[flag.key] = [*(target.get(flag.key) or []), *value]
            else:
                target[flag.key] = value
            used.append(flag.flag)
        if self.command:
            data["command"] = list(self.command)
            used.append("-- COMMAND")
        return data, used


def _env_pairs(items: Sequence[str]) -> dict[str, str]:
    env: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise UserInputError(f"--env: {item!r} is not allowed (expected KEY=VALUE)")
        env[key] = value
    return env


@dataclass(frozen=True)
class JobRequest:
    """A fully-resolved job: what to ask Slurm for and what to run, nothing left to default."""

    spec: JobSpec
    """The job spec with CLI overrides applied (validated)."""
    spec_path: Path
    """The job YAML it came from (absolute)."""
    site: LoadedSite
    """The site config in force."""
    ranks_per_node: int
    """Ranks (tasks) per node: the job's gpus_per_node, else the site's, else 1."""
    gpus_per_node: int
    """GPUs to request per node (0 on CPU sites)."""
    partition: str
    """The partition: the job's, else the site's."""
    nodes_total: int
    """Nodes to allocate: nodes + spares."""
    preflight_level: str
    """The gate's preflight level (off, quick, standard, deep): the job's
    policy.preflight_level, else the site's preflight.level."""
    overrides_used: tuple[str, ...] = ()
    """The CLI flags that changed the YAML (for the record in the job directory)."""
    raw: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)
    """The merged mapping the spec was built from (written to the job directory)."""

    @property
    def ranks(self) -> int:
        """World size: pp x dp."""
        return self.spec.parallelism.pp * self.spec.parallelism.dp


def check_ranks_per_node(cfg: SiteConfig, ranks_per_node: int, where: str) -> None:
    """Ranks per node must fit on one node of the site: its GPUs, or on a CPU site its CPUs
    (Slurm refuses more tasks per node than CPUs); raise UserInputError naming ``where``."""
    limit, unit = ((cfg.nodes.gpus_per_node, "GPUs") if cfg.nodes.gpus_per_node
                   else (cfg.nodes.cpus, "CPUs"))
    if ranks_per_node > limit:
        raise UserInputError(f"{where}: {ranks_per_node} is not allowed "
                             f"(site {cfg.name} has {limit} {unit} per node)")


def _site_path(spec: JobSpec, spec_path: Path, cli_site: Path | None) -> Path | None:
    if cli_site is not None:
        return cli_site
    if spec.site:
        candidate = Path(spec.site)
        return candidate if candidate.is_absolute() else spec_path.parent / candidate
    return None


def spec_source(spec_path: Path, overrides_used: Sequence[str]) -> str:
    """How errors name a job's values: the file, and the flags that overrode it."""
    return f"{spec_path} with {', '.join(overrides_used)}" if overrides_used else str(spec_path)


def resolve_request(spec_path: Path, site_path: Path | None = None,
                    overrides: CliOverrides | None = None) -> JobRequest:
    """Load the job YAML and site, apply ``overrides``, check the layout; raise UserInputError."""
    spec_path = spec_path.resolve()
    raw = load_yaml_file(spec_path)
    if raw is None:
        raise UserInputError(f"{spec_path}: the file is empty (expected a job mapping)")
    # The file alone first, so that its own mistakes are reported against it.
    from_mapping(JobSpec, raw, str(spec_path))
    merged, used = (overrides or CliOverrides()).apply(raw)
    source = spec_source(spec_path, used)
    spec = from_mapping(JobSpec, merged, source)
    site = load_site(_site_path(spec, spec_path, site_path))
    cfg = site.config
    ranks_per_node = spec.resources.gpus_per_node or cfg.nodes.gpus_per_node or 1
    check_ranks_per_node(cfg, ranks_per_node, f"{source}: resources.gpus_per_node")
    if spec.command and merged.get("parallelism") is None:
        # A command job without parallelism: a data-parallel rank per node x GPU.
        spec = dataclasses.replace(spec, parallelism=ParallelismSpec(
            dp=spec.resources.nodes * ranks_per_node))
    try:
        check_layout(spec, ranks_per_node)
    except FieldError as err:
        raise UserInputError(f"{source}: {err}") from None
    nodes_total = spec.resources.nodes + spec.resources.spares
    site_nodes = len(cfg.nodes.node_list())
    if nodes_total > site_nodes:
        raise UserInputError(
            f"{source}: resources: nodes({spec.resources.nodes}) + "
            f"spares({spec.resources.spares}) = {nodes_total} nodes but site {cfg.name} has "
            f"{site_nodes} ({brief(cfg.nodes.names)})")
    if spec.resources.container_image and cfg.mpi.launcher != "srun":
        raise UserInputError(
            f"{source}: resources.container_image needs the srun launcher "
            f"(site {cfg.name} uses mpi.launcher {cfg.mpi.launcher!r})")
    return JobRequest(
        spec=spec, spec_path=spec_path, site=site, ranks_per_node=ranks_per_node,
        gpus_per_node=ranks_per_node if cfg.nodes.gpus_per_node else 0,
        partition=spec.resources.partition or cfg.slurm.partition, nodes_total=nodes_total,
        preflight_level=spec.policy.preflight_level or cfg.preflight.level,
        overrides_used=tuple(used), raw=merged,
    )
