"""Where `gantry site install-plugins` puts things under its prefix:

    <prefix>/bin/gantry                 entry point the plugin and scripts exec (no shell
                                        string ever built from user input)
    <prefix>/lib/gantry_spank.so        the SPANK plugin, built for this site's Slurm
    <prefix>/etc/plugstack.conf         PlugStackConfig= (one `required` line)
    <prefix>/etc/env/<site>.env         NCCL/MPI tuning for --gantry-env (KEY=VALUE)
    <prefix>/etc/preflight.env          extra environment of the node checks (KEY=VALUE)
    <prefix>/etc/slurm.conf.gantry      the slurm.conf lines for an admin to review
    <prefix>/libexec/gantry-{prolog,epilog,healthcheck}.sh
    <prefix>/build/spank/               CMake build tree of the plugin
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from launcher.plugins.scripts import ScriptKind, script_name

SPANK_MODULE = "gantry_spank.so"


@dataclass(frozen=True)
class InstallLayout:
    """Every path of one plugin-suite install, derived from its prefix."""

    prefix: Path
    """The install directory (absolute)."""

    @property
    def bin_gantry(self) -> Path:
        return self.prefix / "bin" / "gantry"

    @property
    def spank_module(self) -> Path:
        return self.prefix / "lib" / SPANK_MODULE

    @property
    def etc_dir(self) -> Path:
        return self.prefix / "etc"

    @property
    def plugstack_conf(self) -> Path:
        return self.etc_dir / "plugstack.conf"

    @property
    def env_dir(self) -> Path:
        return self.etc_dir / "env"

    def env_file(self, site_name: str) -> Path:
        return self.env_dir / f"{site_name}.env"

    @property
    def preflight_env(self) -> Path:
        return self.etc_dir / "preflight.env"

    @property
    def slurm_conf_lines(self) -> Path:
        return self.etc_dir / "slurm.conf.gantry"

    @property
    def libexec_dir(self) -> Path:
        return self.prefix / "libexec"

    def script(self, kind: ScriptKind) -> Path:
        return self.libexec_dir / script_name(kind)

    @property
    def spank_build_dir(self) -> Path:
        return self.prefix / "build" / "spank"
