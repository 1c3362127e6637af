"""Imports go down the layers only.

Every module of topology/ and launcher/ is read with ``ast`` and each of its imports (at
module level, in functions, under TYPE_CHECKING) is checked against :data:`LAYERS`, the one
table of which code may import which: a module imports modules of its own layer or of
layers below it, never above. The standard library and third-party packages are not
layered. docs/architecture.md shows the same table; :func:`layers_markdown` writes it
(``python tests/unit/test_import_layers.py`` prints it).
"""

from __future__ import annotations

import ast
import sys
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PACKAGES = ("topology", "launcher")
ARCHITECTURE_DOC = REPO / "docs" / "architecture.md"
TABLE_BEGIN = "<!-- layers: written by tests/unit/test_import_layers.py -->"
TABLE_END = "<!-- end of layers -->"

LAYERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("topology", ("topology/",)),
    ("launcher base", (
        "launcher/__init__.py", "launcher/errors.py", "launcher/typed_config.py",
        "launcher/console.py", "launcher/atomic_write.py", "launcher/process_runner.py",
        "launcher/environment.py", "launcher/cmake.py", "launcher/install_paths.py",
    )),
    ("schedules, data", ("launcher/schedules/", "launcher/data/", "launcher/schedule_names.py")),
    ("site config", (
        "launcher/site_config.py", "launcher/site_topology.py",
        "launcher/preflight/thresholds.py", "launcher/preflight/xid_actions.py",
    )),
    ("slurm, plugins", ("launcher/slurm/", "launcher/plugins/")),
    ("preflight, native", (
        "launcher/preflight/", "launcher/native/", "launcher/build.py", "launcher/reference/",
    )),
    ("embedded cluster", ("launcher/cluster/",)),
    ("job, gate", (
        "launcher/job_spec.py", "launcher/job_request.py", "launcher/job_placement.py",
        "launcher/job_script.py", "launcher/sbatch_render.py", "launcher/job_dir.py",
        "launcher/job_exit_codes.py", "launcher/placement_record.py",
        "launcher/sbatch_options.py", "launcher/slurm_time.py", "launcher/torch_env.py",
        "launcher/step_labels.py",
        "launcher/job_overrides.py", "launcher/site_slurm.py",
        "launcher/preflight/gate.py", "launcher/preflight/gate_plan.py",
    )),
    ("train, recovery, monitor, report", (
        "launcher/train/", "launcher/recovery/", "launcher/monitor/", "launcher/report/",
    )),
    ("live, site check", ("launcher/live/", "launcher/site_check/")),
    ("job API", (
        "launcher/job_state.py", "launcher/job_submit.py", "launcher/job_logs.py",
        "launcher/api.py",
    )),
    ("demo", ("launcher/demo/",)),
    ("commands", (
        "launcher/commands/", "launcher/job_cli.py", "launcher/cli.py", "launcher/__main__.py",
        "launcher/reference_doc/",
    )),
)
"""Bottom first: (layer name, the files it holds). An entry ending in / holds every file
under that directory that no longer entry names."""


def layer_of(path: str) -> int | None:
    """Index in LAYERS of the repository-relative ``path``: the longest entry naming it."""
    best: tuple[int, int] | None = None
    for index, (_, entries) in enumerate(LAYERS):
        for entry in entries:
            hit = path.startswith(entry) if entry.endswith("/") else path == entry
            if hit and (best is None or len(entry) > best[1]):
                best = (index, len(entry))
    return None if best is None else best[0]


def module_files() -> dict[str, str]:
    """Dotted module name -> repository-relative path, for every module of PACKAGES."""
    found: dict[str, str] = {}
    for package in PACKAGES:
        for path in sorted((REPO / package).rglob("*.py")):
            parts = list(path.relative_to(REPO).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            found[".".join(parts)] = path.relative_to(REPO).as_posix()
    return found


@dataclass(frozen=True)
class Import:
    """One import of one of PACKAGES' modules: who imports what, and where."""

    source: str
    """Repository-relative path of the importing file."""
    line: int
    target: str
    """Repository-relative path of the imported module."""


def imports_in(text: str, path: str, modules: dict[str, str]) -> list[Import]:
    """Every import in ``text`` (the file at ``path``) of a module of PACKAGES; ``from a
    import b`` names module ``a.b`` when that is a module, else ``a``."""
    module = next(name for name, file in modules.items() if file == path)
    package = module if path.endswith("__init__.py") else module.rpartition(".")[0]
    found: list[Import] = []
    for node in ast.walk(ast.parse(text, filename=path)):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join(anchor + ([node.module] if node.module else []))
            names = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base
                     for alias in node.names]
        else:
            continue
        for name in names:
            while name and name not in modules:
                name = name.rpartition(".")[0]  # a name inside a module: the module
            imp = Import(path, node.lineno, modules[name]) if name else None
            if imp is not None and imp not in found:
                found.append(imp)
    return found


def all_imports() -> list[Import]:
    modules = module_files()
    return [imp for path in modules.values()
            for imp in imports_in((REPO / path).read_text(encoding="utf-8"), path, modules)]


def upward(imports: list[Import]) -> list[str]:
    """One line for each import of a layer above the importing file's."""
    found = []
    for imp in imports:
        mine, theirs = layer_of(imp.source), layer_of(imp.target)
        if mine is not None and theirs is not None and theirs > mine:
            found.append(f"{imp.source}:{imp.line} imports {imp.target} "
                         f"({LAYERS[theirs][0]}) from below ({LAYERS[mine][0]})")
    return found


def test_every_module_has_a_layer() -> None:
    missing = sorted(path for path in module_files().values() if layer_of(path) is None)
    assert not missing, f"add these files to LAYERS in {Path(__file__).name}: {missing}"


def test_every_table_entry_names_files() -> None:
    paths = list(module_files().values())
    stale = [entry for _, entries in LAYERS for entry in entries
             if not any(p.startswith(entry) if entry.endswith("/") else p == entry
                        for p in paths)]
    assert not stale, f"LAYERS names files that do not exist: {stale}"


def test_imports_go_down_the_layers_only() -> None:
    found = upward(all_imports())
    assert not found, "imports up the layers:\n" + "\n".join(found)


def test_topology_imports_nothing_of_launcher() -> None:
    into_launcher = [f"{imp.source}:{imp.line} imports {imp.target}" for imp in all_imports()
                     if imp.source.startswith("topology/")
                     and imp.target.startswith("launcher/")]
    assert not into_launcher, into_launcher


def test_the_checker_sees_function_level_and_relative_imports() -> None:
    modules = module_files()
    text = ("import os\nfrom launcher.errors import brief\n\n\ndef f() -> None:\n"
            "    from launcher.job_spec import JobSpec\n    from .cluster import layout\n")
    found = upward(imports_in(text, "launcher/site_config.py", modules))
    assert found == [
        "launcher/site_config.py:6 imports launcher/job_spec.py (job, gate) from below "
        "(site config)",
        "launcher/site_config.py:7 imports launcher/cluster/layout.py (embedded cluster) "
        "from below (site config)",
    ]


def layers_markdown() -> str:
    """LAYERS as the table docs/architecture.md shows (between its layer markers)."""
    rows = ["| layer (bottom first) | files | may import, besides its own layer |",
            "|---|---|---|"]
    for index, (name, entries) in enumerate(LAYERS):
        below = "nothing" if index == 0 else "layer 1" if index == 1 else f"layers 1-{index}"
        files = ", ".join(f"`{entry}`" for entry in entries)
        rows.append(f"| {index + 1} {name} | {files} | {below} |")
    return "\n".join(rows)


def test_architecture_doc_shows_the_table() -> None:
    text = ARCHITECTURE_DOC.read_text(encoding="utf-8")
    assert TABLE_BEGIN in text and TABLE_END in text, f"{ARCHITECTURE_DOC}: no layer markers"
    shown = text.split(TABLE_BEGIN, 1)[1].split(TABLE_END, 1)[0].strip()
    assert shown == layers_markdown(), (
        f"{ARCHITECTURE_DOC}: the layer table differs from LAYERS; paste the output of "
        f"`python {Path(__file__).relative_to(REPO)}` between its markers")


if __name__ == "__main__":
    sys.stdout.write(layers_markdown() + "\n")
