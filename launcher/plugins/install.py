"""`gantry site install-plugins`: plan (validate everything, render every file: nothing
written on bad input), then build the SPANK plugin and write the files atomically.

Never edits a site's slurm.conf: the lines that load the suite are printed and written to
``<prefix>/etc/slurm.conf.gantry`` for an admin to review; an embedded cluster's own
slurm.conf includes them (see :func:`embedded_slurm_conf_lines`).
"""

from __future__ import annotations

import re
import shutil
import sys
from dataclasses import dataclass, field
from pathlib import Path

from launcher.atomic_write import FileSet
from launcher.errors import UserInputError, brief
from launcher.install_paths import import_root
from launcher.plugins import render
from launcher.plugins.build import build_spank
from launcher.plugins.layout import InstallLayout
from launcher.plugins.scripts import SCRIPT_KINDS, ScriptSpec, render_script, slurm_conf_for
from launcher.site_config import LoadedSite, check_env_mapping
from launcher.typed_config import FieldError

_SITE_NAME = re.compile(r"[A-Za-z0-9_-][A-Za-z0-9_.-]{0,63}\Z")
_CONF_UNSAFE = re.compile(r"[\s#\"'\\]|[^\x20-\x7e]")
"""Characters a path may not hold to be written into plugstack.conf / slurm.conf."""


@dataclass(frozen=True)
class PlannedFile:
    """One file of the install."""

    path: Path
    """Where it goes."""
    text: str
    """Its contents."""
    mode: int = 0o644
    """Permissions (scripts 0755)."""


@dataclass(frozen=True)
class InstallPlan:
    """Everything an install does, decided before anything is written."""

    site: LoadedSite
    """The site config and its file."""
    layout: InstallLayout
    """Paths under the prefix."""
    choice: render.SuiteChoice
    """Which parts are installed."""
    files: list[PlannedFile] = field(default_factory=list)
    """Every file written (the plugin module comes from the build)."""
    slurm_conf_lines: list[str] = field(default_factory=list)
    """The slurm.conf lines that load the suite."""


def default_prefix(site: LoadedSite) -> Path | None:
    """plugins.prefix (relative to the site file), else <run dir>/plugins when embedded."""
    configured = site.config.plugins.prefix
    if configured:
        return site.resolve(configured).resolve()
    if site.config.slurm.embedded:
        return site.run_dir() / "plugins"
    return None


def _check_conf_path(source: str, value: Path) -> None:
    if _CONF_UNSAFE.search(str(value)):
        raise UserInputError(
            f"{source}: {brief(str(value))} is not allowed (expected a path without blanks, "
            "quotes, '#' or backslashes: it is written into plugstack.conf and slurm.conf)"
        )


def _site_error(site: LoadedSite, err: FieldError, section: str) -> UserInputError:
    return UserInputError(f"{site.path}: {section}.{err}")


def check_suite_fields(site: LoadedSite, chosen: Path, from_flag: bool = False) -> None:
    """The site's fields the suite writes into its files (the prefix, the name, mpi.env and
    nccl.env) as it can write them; each problem is a UserInputError naming the field (or
    --prefix when the prefix came from the flag)."""
    cfg = site.config
    _check_conf_path("--prefix" if from_flag else f"{site.path}: plugins.prefix", chosen)
    if not _SITE_NAME.match(cfg.name):
        raise UserInputError(
            f"{site.path}: name: {brief(cfg.name)} is not allowed for the plugin suite (expected "
            "at most 64 letters, digits, '_', '.', '-', not starting with '.')"
        )
    for section, env in (("mpi.env", cfg.mpi.env), ("nccl.env", cfg.nccl.env)):
        try:
            check_env_mapping(section.split(".")[1], env)
        except FieldError as err:
            raise _site_error(site, err, section.split(".")[0]) from None


def plan_install(site: LoadedSite, prefix: Path | None = None) -> InstallPlan:
    """Validate the site for the suite and render every file (no side effects)."""
    cfg = site.config
    plugins = cfg.plugins
    chosen = prefix.resolve() if prefix is not None else default_prefix(site)
    if chosen is None:
        raise UserInputError(
            f"{site.path}: plugins.prefix: not set and the site is not embedded (pass "
            "--prefix DIR or set plugins.prefix)"
        )
    check_suite_fields(site, chosen, from_flag=prefix is not None)
    if chosen.exists() and not chosen.is_dir():
        source = "--prefix" if prefix is not None else f"{site.path}: plugins.prefix"
        raise UserInputError(f"{source}: {chosen} exists and is not a directory")
    _check_conf_path(f"{site.path}: the site file path", site.path)

    layout = InstallLayout(chosen)
    choice = render.SuiteChoice(
        spank=plugins.spank,
        prolog=plugins.prolog,
        epilog=plugins.epilog,
        health_check=plugins.health_check,
        health_check_interval_s=plugins.health_check_interval_s,
    )
    root = import_root()
    package_root = str(root) if root is not None else None
    level = render.plugin_level(cfg.preflight.level)
    site_path = str(site.path)
    gantry = str(layout.bin_gantry)
    files = [PlannedFile(layout.bin_gantry, render.gantry_wrapper(sys.executable, package_root),
                         0o755)]
    if choice.spank:
        files.append(PlannedFile(layout.plugstack_conf, render.plugstack_conf(
            layout, site_path, cfg.name, level, plugins.preflight_timeout_s,
            bool(plugins.preflight_env))))
        files.append(PlannedFile(layout.env_file(cfg.name), render.env_file(
            f"site {cfg.name!r}: NCCL/MPI tuning for --gantry-env (mpi.env, nccl.env)",
            {**cfg.mpi.env, **cfg.nccl.env})))
        if plugins.preflight_env:
            files.append(PlannedFile(layout.preflight_env, render.env_file(
                f"site {cfg.name!r}: environment of gantry's node checks "
                "(plugins.preflight_env)", plugins.preflight_env)))
    wanted = {"prolog": choice.prolog, "epilog": choice.epilog,
              "healthcheck": choice.health_check}
    for kind in SCRIPT_KINDS:
        if wanted[kind]:
            files.append(PlannedFile(layout.script(kind), render_script(ScriptSpec(
                kind, (gantry,), site_path, level, "gantry site install-plugins",
                tuple(plugins.preflight_env.items()),
                slurm_conf=tuple(slurm_conf_for(kind, layout.script(kind),
                                                choice.health_check_interval_s)))), 0o755))
    lines = render.slurm_conf_lines(layout, choice)
    files.append(PlannedFile(layout.slurm_conf_lines, (
        f"# slurm.conf lines that load gantry's plugin suite for site {cfg.name!r}\n"
        "# (written by `gantry site install-plugins`; review, then add them to slurm.conf)\n"
        + "".join(f"{line}\n" for line in lines))))
    return InstallPlan(site, layout, choice, files, lines)


def perform_install(plan: InstallPlan, slurm_include_dir: str | None = None) -> list[Path]:
    """Build the plugin (when chosen), then write every file, all or none (renamed into
    place: running slurmstepds keep the old inode); returns the paths written."""
    written: list[Path] = []
    module: Path | None = None
    if plan.choice.spank:
        module = build_spank(plan.layout.spank_build_dir, slurm_include_dir)
    with FileSet() as files:
        for planned in plan.files:
            planned.path.parent.mkdir(parents=True, exist_ok=True)
            files.write_text(planned.path, planned.text, mode=planned.mode)
            written.append(planned.path)
        if module is not None:
            target = plan.layout.spank_module
            target.parent.mkdir(parents=True, exist_ok=True)
            with files.temp_path(target, mode=0o755) as tmp:
                shutil.copyfile(module, tmp)
            written.append(target)
    return written


def embedded_slurm_conf_lines(site: LoadedSite) -> list[str]:
    """The lines an embedded cluster's slurm.conf gets when plugins.enabled (empty when not):
    the same paths `install-plugins` writes to its default prefix."""
    if not site.config.plugins.enabled:
        return []
    return plan_install(site).slurm_conf_lines
