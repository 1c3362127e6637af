"""The SPANK plugin builds warning-free with the hardened flags (pyxis-style) and exports only
Slurm's plugin symbols and the slurm_spank_* hooks; checked on the real build output with
nm/readelf."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from launcher.plugins.build import build_spank

EXPECTED_EXPORTS = {
    "plugin_name",
    "plugin_type",
    "plugin_version",
    "spank_plugin_version",
    "slurm_spank_init",
    "slurm_spank_init_post_opt",
    "slurm_spank_user_init",
    "slurm_spank_task_init",
}


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """A fresh build; returns the module and the compiler's output (verbose build)."""
    if shutil.which("cmake") is None or not Path("/usr/include/slurm/spank.h").exists():
        pytest.fail("cmake and the Slurm headers (libslurm-dev) are required for this test")
    build_dir = tmp_path_factory.mktemp("spank-build")
    module = build_spank(build_dir)
    log = subprocess.run(
        ["cmake", "--build", str(build_dir), "--clean-first", "--verbose"],
        capture_output=True, text=True, check=True,
    )
    return module, log.stdout + log.stderr


def _dynamic_symbols(module: Path, defined: bool) -> set[str]:
    flag = "--defined-only" if defined else "--undefined-only"
    out = subprocess.run(["nm", "-D", flag, str(module)], capture_output=True, text=True,
                         check=True).stdout
    return {line.split()[-1].split("@")[0] for line in out.splitlines() if line.strip()}


def test_exports_only_plugin_symbols_and_hooks(built: tuple[Path, str]) -> None:
    module, _ = built
    assert _dynamic_symbols(module, defined=True) == EXPECTED_EXPORTS


def test_hardened_flags_used_and_no_warnings(built: tuple[Path, str]) -> None:
    module, log = built
    compile_lines = [ln for ln in log.splitlines() if "gantry_spank.c" in ln and " -c " in ln]
    assert compile_lines, log
    for flag in ("-fstack-protector-strong", "-D_FORTIFY_SOURCE=2", "-fPIC", "-Wall",
                 "-Wextra", "-Werror", "-fvisibility=hidden", "-O2"):
        assert flag in compile_lines[0], (flag, compile_lines[0])
    link_lines = [ln for ln in log.splitlines() if "-o gantry_spank.so" in ln]
    assert link_lines and "-z,relro,-z,now" in link_lines[0], log
    assert "warning" not in log.lower(), log
    dynamic = subprocess.run(["readelf", "-d", "-l", str(module)], capture_output=True,
                             text=True, check=True).stdout
    assert "BIND_NOW" in dynamic and "GNU_RELRO" in dynamic
    imports = _dynamic_symbols(module, defined=False)
    assert "__stack_chk_fail" in imports
    assert any(name.endswith("_chk") and name != "__stack_chk_fail" for name in imports), imports
    # Slurm's API comes from the loading process (srun/slurmstepd), not a linked libslurm.
    assert {"slurm_error", "spank_option_register", "spank_setenv"} <= imports
    needed = [ln for ln in dynamic.splitlines() if "NEEDED" in ln]
    assert not any("slurm" in ln for ln in needed), needed

