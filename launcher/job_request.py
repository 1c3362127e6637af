"""Resolves a job request: job YAML + site config + CLI flags -> one fully-resolved JobRequest.

This is the one place precedence is decided: CLI flags > job YAML > site defaults. Errors
name the file (or the flag), the field, the value and what is allowed; nothing is created
or submitted before resolution succeeds.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from launcher.errors import UserInputError, brief
from launcher.job_overrides import CliOverrides
from launcher.job_spec import JobSpec, ParallelismSpec, check_layout
from launcher.site_config import LoadedSite, SiteConfig, load_site
from launcher.typed_config import FieldError, from_mapping, load_yaml_file


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
