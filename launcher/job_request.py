"""Resolves a job request: job YAML + site config + CLI flags -> one fully-resolved JobRequest.

This is the one place precedence is decided: CLI flags > job YAML > site defaults. Errors
name the file (or the flag), the field, the value and what is allowed; nothing is created
or submitted before resolution succeeds.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from launcher.errors import UserInputError, brief
from launcher.job_spec import NOT_UTF8, JobSpec, check_layout, is_utf8
from launcher.site_config import LoadedSite, SiteConfig, load_site
from launcher.typed_config import FieldError, from_mapping, load_yaml_file


@dataclass(frozen=True)
class CliOverrides:
    """Job fields given on the command line; None means "not given" (the YAML decides)."""

    name: str | None = None
    """--name: job name."""
    nodes: int | None = None
    """--nodes: nodes that run ranks."""
    spares: int | None = None
    """--spares: extra nodes for preflight replacements."""
    gpus_per_node: int | None = None
    """--gpus-per-node: ranks (GPUs) per node."""
    cpus_per_task: int | None = None
    """--cpus-per-task: CPUs per rank."""
    time_limit: str | None = None
    """--time: Slurm time limit."""
    partition: str | None = None
    """--partition."""
    account: str | None = None
    """--account."""
    qos: str | None = None
    """--qos."""
    container_image: str | None = None
    """--container-image (pyxis)."""
    dependencies: tuple[str, ...] = ()
    """--dependency (repeatable): added to the YAML's dependencies."""
    env: tuple[str, ...] = ()
    """--env KEY=VALUE (repeatable): added to / replacing the YAML's env."""
    preflight_level: str | None = None
    """--preflight: preflight level (off, quick, standard, deep)."""
    command: tuple[str, ...] = ()
    """Arguments after `--`: run this argv on every rank instead of `gantry train`."""

    def check_text(self) -> None:
        """Every text flag is UTF-8: argv bytes that are not reach Python as lone surrogates,
        which no batch script can hold; UserInputError naming the flag otherwise."""
        flags: list[tuple[str, str | None]] = [
            ("--name", self.name), ("--time", self.time_limit), ("--partition", self.partition),
            ("--account", self.account), ("--qos", self.qos),
            ("--container-image", self.container_image),
            ("--preflight", self.preflight_level),
            *(("--dependency", d) for d in self.dependencies),
            *(("--env", e) for e in self.env), *(("-- COMMAND", c) for c in self.command)]
        for flag, value in flags:
            if value is not None and not is_utf8(value):
                raise UserInputError(f"{flag}: {brief(value)} is not allowed ({NOT_UTF8})")

    def apply(self, raw: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
        """``raw`` (the job YAML mapping) with the overrides set; also the flags used."""
        self.check_text()
        data = copy.deepcopy(raw)
        used: list[str] = []

        def put(section: str | None, key: str, value: Any, flag: str) -> None:
            if value is None:
                return
            target = data if section is None else data.setdefault(section, {})
            if not isinstance(target, dict):
                raise UserInputError(f"{flag}: cannot override {section}.{key} "
                                     f"({section} in the job file is not a mapping)")
            target[key] = value
            used.append(flag)

        put(None, "name", self.name, "--name")
        for key, flag in (("nodes", "--nodes"), ("spares", "--spares"),
                          ("gpus_per_node", "--gpus-per-node"),
                          ("cpus_per_task", "--cpus-per-task"), ("time_limit", "--time"),
                          ("partition", "--partition"), ("account", "--account"),
                          ("qos", "--qos"), ("container_image", "--container-image")):
            put("resources", key, getattr(self, key), flag)
        put("policy", "preflight_level", self.preflight_level, "--preflight")
        if self.dependencies:
            resources = data.setdefault("resources", {})
            resources["dependencies"] = [*(resources.get("dependencies") or []),
                                         *self.dependencies]
            used.append("--dependency")
        if self.env:
            env = dict(data.get("env") or {})
            for item in self.env:
                key, sep, value = item.partition("=")
                if not sep or not key:
                    raise UserInputError(f"--env: {item!r} is not allowed (expected KEY=VALUE)")
                env[key] = value
            data["env"] = env
            used.append("--env")
        if self.command:
            data["command"] = list(self.command)
            used.append("-- COMMAND")
        return data, used


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
