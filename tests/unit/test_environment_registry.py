"""The environment registry (launcher/environment.py plus the native switches of
launcher/native/runtime_config.py) names every GANTRY_* variable of the sources and nothing
else: each GANTRY_* word of launcher/, topology/, native/src/, native/include/, the SPANK
plugin and sbatch_templates/, and each `GANTRY_<TOOL>` override of a tool the Python code
looks up by name (`tool_path("srun")`, `run(layout, "scancel", ...)`), is a registered
variable or a known non-variable (C macro, CMake option, include guard); each registered name
occurs in those sources."""

from __future__ import annotations

import re
from pathlib import Path

from launcher.environment import GROUPS, NOT_ENVIRONMENT, VARIABLES, all_variables
from launcher.native.runtime_config import SWITCHES

REPO = Path(__file__).resolve().parents[2]
SOURCE_DIRS = ("launcher", "topology", "native/src", "native/include", "native/spank",
               "sbatch_templates")
SUFFIXES = {".py", ".c", ".h", ".cu", ".cpp", ".j2"}
NAME = re.compile(r"(?:\b|(?<=-D))GANTRY_[A-Z0-9_]*[A-Z0-9]_?")  # -DGANTRY_X: a CMake option
INCLUDE_GUARD = re.compile(r"GANTRY_\w+_H")
TOOL_CALL = re.compile(
    r'(?:\bpath_of\(|\brequire_tool\(|\btool_path\(|\btool_overridden\(|\brun\(layout, )'
    r'"([a-z][a-z-]*)"')
REGISTRY_FILES = {REPO / "launcher" / "environment.py"}


def _sources() -> list[Path]:
    return [path for top in SOURCE_DIRS for path in sorted((REPO / top).rglob("*"))
            if path.suffix in SUFFIXES and path not in REGISTRY_FILES
            and "__pycache__" not in path.parts]


def names_in(text: str) -> set[str]:
    """GANTRY_* words of ``text``, include guards left out."""
    return {name for name in NAME.findall(text) if not INCLUDE_GUARD.fullmatch(name)}


def tool_variable(tool: str) -> str:
    """The override of a tool looked up by name: slurmctld -> GANTRY_SLURMCTLD."""
    return "GANTRY_" + tool.upper().replace("-", "_")


def source_names() -> dict[str, set[str]]:
    """GANTRY_* name -> the repository paths that spell it (or derive it from a tool)."""
    found: dict[str, set[str]] = {}
    for path in _sources():
        text = path.read_text(encoding="utf-8", errors="replace")
        where = path.relative_to(REPO).as_posix()
        derived = {tool_variable(tool) for tool in TOOL_CALL.findall(text)}
        for name in names_in(text) | derived:
            found.setdefault(name, set()).add(where)
    return found


def registered() -> set[str]:
    return {v.name for v in all_variables()} | {s.name for s in SWITCHES}


def test_every_gantry_name_of_the_sources_is_registered() -> None:
    found = source_names()
    unknown = {name: sorted(paths) for name, paths in found.items()
               if name not in registered() and name not in NOT_ENVIRONMENT}
    assert not unknown, ("add these to launcher/environment.py (VARIABLES, or NOT_ENVIRONMENT "
                         f"for a macro or CMake option): {unknown}")


def test_every_registered_name_occurs_in_the_sources() -> None:
    found = source_names()
    stale = sorted((registered() | set(NOT_ENVIRONMENT)) - set(found))
    assert not stale, f"no source names these any more; drop them from the registry: {stale}"


def test_names_are_unique_and_every_group_is_shown() -> None:
    names = [v.name for v in all_variables()] + [s.name for s in SWITCHES]
    assert len(names) == len(set(names))
    assert not set(names) & set(NOT_ENVIRONMENT)
    assert [group for group, _ in GROUPS] == list(VARIABLES)
    assert all(v.meaning and v.default and v.reader for v in all_variables())


def test_the_grep_finds_names_and_skips_guards() -> None:
    text = ('#ifndef GANTRY_COMM_H\nos.environ.get("GANTRY_NEW_THING")  # and GANTRY_<TOOL>\n'
            'GANTRY_SITE_BACKEND_{x} -DGANTRY_CUDNN=OFF XGANTRY_NOT\n')
    assert names_in(text) == {"GANTRY_NEW_THING", "GANTRY_SITE_BACKEND_", "GANTRY_CUDNN"}
    calls = 'tools.path_of("munged"), run(layout, "scancel", jobs), tool_path("nvidia-smi", env)'
    assert [tool_variable(t) for t in TOOL_CALL.findall(calls)] == [
        "GANTRY_MUNGED", "GANTRY_SCANCEL", "GANTRY_NVIDIA_SMI"]
