"""The text of every file `gantry site install-plugins` writes: pure functions of their
inputs (golden-tested). Values that land in a shell script are shell-quoted; values that
land in plugstack.conf / slurm.conf / KEY=VALUE files are validated by the caller."""

from __future__ import annotations

import shlex
from collections.abc import Mapping
from dataclasses import dataclass

from launcher.plugins.layout import InstallLayout
from launcher.plugins.scripts import slurm_conf_for

PLUGIN_LEVELS = ("quick", "standard")
"""Levels the SPANK plugin runs per node (deep needs the whole allocation: the gate)."""


@dataclass(frozen=True)
class SuiteChoice:
    """Which parts of the suite a site installs, and their settings."""

    spank: bool
    """The SPANK plugin and plugstack.conf."""
    prolog: bool
    """Prolog=."""
    epilog: bool
    """Epilog=."""
    health_check: bool
    """HealthCheckProgram=."""
    health_check_interval_s: int
    """HealthCheckInterval=."""


def plugin_level(site_level: str) -> str:
    """The plugin's default level: the site's, except deep (a per-node plugin runs standard)."""
    return site_level if site_level in PLUGIN_LEVELS else "standard"


def gantry_wrapper(python: str, pythonpath: str | None) -> str:
    """<prefix>/bin/gantry: runs this gantry (``python -m launcher``) with its arguments."""
    q = shlex.quote
    lines = [
        "#!/bin/sh",
        "# gantry entry point for Slurm's plugin suite (SPANK plugin, Prolog/Epilog,",
        "# HealthCheckProgram); written by `gantry site install-plugins`; do not edit.",
    ]
    if pythonpath:
        lines += [
            f'PYTHONPATH={q(pythonpath)}"${{PYTHONPATH:+:$PYTHONPATH}}"',
            "export PYTHONPATH",
        ]
    lines.append(f'exec {q(python)} -m launcher "$@"')
    return "\n".join(lines) + "\n"


def plugstack_conf(
    layout: InstallLayout,
    site_path: str,
    site_name: str,
    level: str,
    timeout_s: int,
    with_preflight_env: bool,
) -> str:
    """plugstack.conf: the plugin is `required` (a node that cannot load it must not run
    steps ungated); every argument is key=value (paths checked free of blanks)."""
    args = [
        f"gantry={layout.bin_gantry}",
        f"site={site_path}",
        f"level={level}",
        f"timeout={timeout_s}",
        f"env_dir={layout.env_dir}",
        f"default_env={site_name}",
    ]
    if with_preflight_env:
        args.append(f"preflight_env={layout.preflight_env}")
    return (
        "# plugstack.conf for gantry's SPANK plugin, written by `gantry site install-plugins`"
        f" for site {site_name!r}.\n"
        "# Options: srun/sbatch/salloc --gantry-preflight[=quick|standard], "
        "--gantry-env[=SITE].\n"
        f"required {layout.spank_module} {' '.join(args)}\n"
    )


def env_file(title: str, env: Mapping[str, str]) -> str:
    """A KEY=VALUE file as the plugin reads it (literal values, no quoting, '#' comments)."""
    lines = [f"# {title}", "# written by `gantry site install-plugins`; do not edit."]
    lines += [f"{key}={value}" for key, value in env.items()]
    return "\n".join(lines) + "\n"


def slurm_conf_lines(layout: InstallLayout, choice: SuiteChoice) -> list[str]:
    """The slurm.conf lines that load the suite (printed for an admin; an embedded
    cluster's slurm.conf includes them)."""
    lines: list[str] = []
    if choice.spank:
        lines.append(f"PlugStackConfig={layout.plugstack_conf}")
    if choice.prolog:
        lines += slurm_conf_for("prolog", layout.script("prolog"))
    if choice.epilog:
        lines += slurm_conf_for("epilog", layout.script("epilog"))
    if choice.health_check:
        lines += slurm_conf_for("healthcheck", layout.script("healthcheck"),
                                choice.health_check_interval_s)
    return lines
