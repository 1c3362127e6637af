"""Every Slurm (and munge) program gantry starts goes through the one runner.

Each module of launcher/ and topology/ is read with ``ast``. A module that starts a process
(:data:`SPAWNERS`: subprocess, os.exec*/spawn*/system/popen, asyncio subprocesses, the
bounded runner's ``run_tool``) and also names a Slurm or munge program in code (a string
that is the program's name, starts with it and a blank, or ends in ``/<name>``; docstrings
and comments do not count) fails the test: its Slurm call must go through
launcher/slurm/runner.py (``run_slurm``, ``CommandRunner``, ``spawn_daemon``), the one module
allowed to start them. Tool paths come from the one tool rule in launcher/slurm/tools.py, so
a module that looks a tool up there by a name it does not spell (``tool_path(tool)``) and
starts a process fails too.
"""

from __future__ import annotations

import ast
from pathlib import Path

from launcher.slurm.tools import MUNGE_TOOLS, SLURM_TOOLS

REPO = Path(__file__).resolve().parents[2]
PACKAGES = ("launcher", "topology")
RUNNER = "launcher/slurm/runner.py"
PROGRAMS = SLURM_TOOLS | MUNGE_TOOLS

SPAWNERS = {
    "subprocess": {"run", "Popen", "call", "check_call", "check_output", "getoutput",
                   "getstatusoutput"},
    "os": {"system", "popen", "execl", "execle", "execlp", "execlpe", "execv", "execve",
           "execvp", "execvpe", "spawnl", "spawnle", "spawnlp", "spawnlpe", "spawnv",
           "spawnve", "spawnvp", "spawnvpe", "posix_spawn", "posix_spawnp", "fork"},
    "asyncio": {"create_subprocess_exec", "create_subprocess_shell"},
    "pty": {"spawn"},
    "process_runner": {"run_tool"},
    "launcher.process_runner": {"run_tool"},
}
"""module -> the functions of it that start a process."""

LOOKUPS = {"tool_path", "require_tool", "resolve_tool"}
"""The tool rule's functions, which find a program by name (Slurm's among others)."""


def names_program(text: str) -> str | None:
    """The Slurm or munge program ``text`` names, if any: the name itself, the name and
    arguments, or a path ending in it."""
    first = text.strip().split(" ", 1)[0] if text.strip() else ""
    name = first.rsplit("/", 1)[-1]
    return name if name in PROGRAMS else None


def _docstrings(tree: ast.AST) -> set[int]:
    """ids of the string constants that stand alone as statements (docstrings, field docs)."""
    return {id(node.value) for node in ast.walk(tree)
            if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)}


def _spawner_names(tree: ast.AST) -> tuple[dict[str, str], set[str]]:
    """(alias -> module for imported SPAWNERS modules, bare names imported from them)."""
    modules: dict[str, str] = {}
    bare: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name in SPAWNERS:
                    modules[alias.asname or alias.name] = alias.name
        elif isinstance(node, ast.ImportFrom) and node.module is not None:
            if node.module in SPAWNERS:
                bare |= {alias.asname or alias.name for alias in node.names
                         if alias.name in SPAWNERS[node.module]}
            for alias in node.names:  # from launcher import process_runner
                if f"{node.module}.{alias.name}" in SPAWNERS:
                    modules[alias.asname or alias.name] = f"{node.module}.{alias.name}"
    return modules, bare


def _called(node: ast.Call) -> str:
    func = node.func
    if isinstance(func, ast.Attribute):
        return func.attr
    return func.id if isinstance(func, ast.Name) else ""


def _is_spawner(func: ast.expr, modules: dict[str, str], bare: set[str]) -> bool:
    if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name):
        return func.value.id in modules and func.attr in SPAWNERS[modules[func.value.id]]
    return isinstance(func, ast.Name) and func.id in bare


def slurm_calls(text: str, path: str) -> list[str]:
    """One line per process start in ``text`` (the module at ``path``) when the module also
    names a Slurm or munge program or looks a tool up by a name it does not spell."""
    tree = ast.parse(text, filename=path)
    docs = _docstrings(tree)
    modules, bare = _spawner_names(tree)
    spawns: list[int] = []
    named: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            func = node.func
            if _is_spawner(func, modules, bare):
                spawns.append(node.lineno)
            if _called(node) in LOOKUPS and node.args and not (
                    isinstance(node.args[0], ast.Constant)
                    and isinstance(node.args[0].value, str)):
                named.append(f"{_called(node)}(...) at line {node.lineno}")
        elif (isinstance(node, ast.Constant) and isinstance(node.value, str)
              and id(node) not in docs):
            program = names_program(node.value)
            if program is not None:
                named.append(f"{program!r} at line {node.lineno}")
    if not spawns or not named:
        return []
    return [f"{path}:{line} starts a process in a module that names {', '.join(named[:3])}"
            for line in sorted(set(spawns))]


def module_paths() -> list[str]:
    return [path.relative_to(REPO).as_posix() for package in PACKAGES
            for path in sorted((REPO / package).rglob("*.py"))]


def test_slurm_programs_start_only_in_the_one_runner() -> None:
    found = [line for path in module_paths() if path != RUNNER
             for line in slurm_calls((REPO / path).read_text(encoding="utf-8"), path)]
    assert not found, ("Slurm programs started outside " + RUNNER + " (use run_slurm, "
                       "CommandRunner or spawn_daemon):\n" + "\n".join(found))


def test_the_runner_is_where_the_processes_start() -> None:
    """The exemption is not idle: the runner itself starts processes."""
    text = (REPO / RUNNER).read_text(encoding="utf-8")
    modules, bare = _spawner_names(ast.parse(text))
    assert "subprocess" in modules.values() and "run_tool" in bare


CAUGHT = {
    "which": "import shutil, subprocess\n"
             "def v() -> None:\n    sinfo = shutil.which('sinfo')\n"
             "    subprocess.run([sinfo, '-V'])\n",
    "name passed in": "import subprocess\nfrom launcher.slurm.tools import require_tool\n"
                      "def run(tool: str) -> None:\n    subprocess.run([require_tool(tool)])\n"
                      "def ping() -> None:\n    run('x')\n",
    "literal elsewhere": "from launcher.process_runner import run_tool\n"
                         "def argv() -> list[str]:\n    return ['srun', '-N1']\n"
                         "def go() -> None:\n    run_tool(argv(), 1.0)\n",
    "exec": "import os as o\ndef f() -> None:\n    o.execvp('/usr/bin/scontrol', ['x'])\n",
    "string command": "import subprocess\ndef f() -> None:\n"
                      "    subprocess.run('scancel 5', shell=True)\n",
    "daemon": "from subprocess import Popen as P\nP(['/usr/sbin/munged', '-F'])\n",
}


def test_the_checker_catches_each_way_of_starting_slurm() -> None:
    for what, text in CAUGHT.items():
        assert slurm_calls(text, "launcher/x.py"), what


def test_the_checker_ignores_docstrings_and_other_tools() -> None:
    text = ('"""Runs sinfo, see `scontrol show node`."""\nimport subprocess\n'
            'def f() -> None:\n    """srun is not run here."""\n'
            "    subprocess.run(['cmake', '--build', 'srun-dir'])\n"
            "    tool_path('nvidia-smi')\n")
    assert slurm_calls(text, "launcher/x.py") == []
    assert [names_program(t) for t in ("sinfo", "scontrol show node", "/usr/sbin/slurmd",
                                       "srun-dir", "gantry: sinfo")] == [
        "sinfo", "scontrol", "slurmd", None, None]
