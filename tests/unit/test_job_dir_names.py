"""launcher/job_dir.py owns the names in a job, attempt and checkpoint directory.

Three checks: the rendered batch scripts (tests/golden/*.sbatch) name only files the owner
defines, under the environment names it defines; the templates (sbatch_templates/) spell
none of them but take each from the renderer's ``names`` (launcher/sbatch_render.py); and
no Python module of launcher/ or bench/ but the owner spells one of the names (of a file, a
directory, an environment variable) as a string literal.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

from launcher import job_dir

REPO = Path(__file__).resolve().parents[2]
GOLDEN = sorted((REPO / "tests" / "golden").glob("*.sbatch"))
TEMPLATES = sorted((REPO / "sbatch_templates").rglob("*.j2"))

#: Files in an attempt directory the batch script reads or writes.
GATE_FILES = {job_dir.PREFLIGHT_REPORT_FILE, job_dir.CHOSEN_NODES_FILE,
              job_dir.LAUNCH_NODES_FILE, job_dir.STOP_FILE, job_dir.STOP_REQUEST_FILE}
ATTEMPT_FILES = GATE_FILES | {job_dir.RECOVERY_FILE, job_dir.NEXT_NODES_FILE,
                              job_dir.MONITOR_LOG_FILE, job_dir.MONITOR_STOP_FILE,
                              job_dir.PASSED_NODES_FILE, job_dir.FABRIC_FILE,
                              job_dir.GATE_RECORD_FILE}
#: Everything the owner names that a module might spell.
OWNED = {value for key, value in vars(job_dir).items()
         if key.endswith(("_FILE", "_DIR", "_ENV")) and isinstance(value, str)}
ENV_NAMES = {value for key, value in vars(job_dir).items() if key.endswith("_ENV")}

OWNER = "launcher/job_dir.py"
#: Modules that name the job directory's environment variables as data: the environment
#: reference lists every GANTRY_* variable, in the base layer below the owner.
REFERENCE = {"launcher/environment.py"}
#: Owned names that are ordinary words elsewhere ("nodes" is a Slurm JSON key, "runs" an
#: outcome, "logs", "schedules" and "report" command names, "ranks" a JSON key of several
#: records).
COMMON_WORDS = {job_dir.CHOSEN_NODES_FILE, job_dir.RUNS_DIR, job_dir.LOGS_DIR,
                job_dir.SCHEDULES_DIR, job_dir.RANKS_DIR, job_dir.REPORT_DIR}


def test_the_golden_scripts_use_the_owners_names() -> None:
    assert GOLDEN
    for path in GOLDEN:
        text = path.read_text(encoding="utf-8")
        in_attempt = set(re.findall(r'\$attempt_dir/([A-Za-z0-9_.-]+)', text))
        in_job = set(re.findall(r'\$GANTRY_JOB_DIR/([A-Za-z0-9_.-]+)', text))
        exported = set(re.findall(r'^\s*export (GANTRY_[A-Z_]*DIR)=', text, re.MULTILINE))
        assert in_attempt <= ATTEMPT_FILES, (path.name, in_attempt - ATTEMPT_FILES)
        assert in_job <= {job_dir.RUNS_DIR}, (path.name, in_job)
        assert f'"${job_dir.JOB_DIR_ENV}/{job_dir.RUNS_DIR}/$SLURM_JOB_ID-$restarts"' in text
        assert {job_dir.JOB_DIR_ENV, job_dir.ATTEMPT_DIR_ENV} <= exported, (path.name, exported)
        if "--need " in text:  # a script with the gate step
            assert in_attempt >= GATE_FILES, path.name


def template_spelled(text: str) -> list[str]:
    """The owned names a template spells outside its ``{{ }}``, ``{% %}`` and ``{# #}``: an
    owned name after a ``/`` (a path; the bare words are shell variables and English), an
    environment name anywhere."""
    plain = re.sub(r"\{\{.*?\}\}|\{%.*?%\}|\{#.*?#\}", "", text, flags=re.DOTALL)
    paths = {m.group(1) for m in re.finditer(r"/([A-Za-z0-9_.-]+)", plain)} & OWNED
    return sorted(paths | {name for name in ENV_NAMES if name in plain})


def test_the_templates_take_the_names_from_the_renderer() -> None:
    assert TEMPLATES
    spelled = {path.relative_to(REPO).as_posix(): hits for path in TEMPLATES
               if (hits := template_spelled(path.read_text(encoding="utf-8")))}
    assert not spelled, f"use {{{{ names.<constant> }}}} of launcher/job_dir.py: {spelled}"


def test_the_template_check_finds_a_spelled_name() -> None:
    text = ('x="$GANTRY_JOB_DIR/runs/$id"\n{# $attempt_dir/nodes #}\n'
            'y="$attempt_dir/{{ names.STOP_FILE }}" "$attempt_dir/launch_nodes"\n')
    assert template_spelled(text) == ["GANTRY_JOB_DIR", "launch_nodes", "runs"]


def spelled_names(path: Path, names: set[str] = OWNED - COMMON_WORDS) -> list[str]:
    """``line: literal`` for each string literal in ``path`` that is an owned name, or a
    checkpoint step directory's f-string."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) \
                and node.value in names:
            found.append(f"{node.lineno}: {node.value!r}")
        elif isinstance(node, ast.JoinedStr) and node.values \
                and isinstance(node.values[0], ast.Constant) \
                and str(node.values[0].value).startswith("step_"):
            found.append(f"{node.lineno}: f'step_...'")
    return found


def test_no_other_module_spells_an_owned_name() -> None:
    spelled = {}
    for path in sorted([*(REPO / "launcher").rglob("*.py"), *(REPO / "bench").rglob("*.py")]):
        rel = path.relative_to(REPO).as_posix()
        names = OWNED - COMMON_WORDS - (ENV_NAMES if rel in REFERENCE else set())
        if rel != OWNER and (hits := spelled_names(path, names)):
            spelled[rel] = hits
    assert not spelled, f"use the constants of launcher/job_dir.py: {spelled}"


def test_the_literal_check_finds_a_spelled_name(tmp_path: Path) -> None:
    sample = tmp_path / "sample.py"
    sample.write_text('x = run / "metrics.jsonl"\ny = root / f"step_{n:08d}"\nz = "nodes"\n'
                      'w = os.environ.get("GANTRY_JOB_DIR")\n')
    assert spelled_names(sample) == ["1: 'metrics.jsonl'", "2: f'step_...'",
                                     "4: 'GANTRY_JOB_DIR'"]


def test_checkpoint_step_directories() -> None:
    step = job_dir.checkpoint_step_dir(Path("/ck"), 42)
    assert step == Path("/ck/step_00000042")
    assert job_dir.checkpoint_step_of(step.name) == 42
    assert job_dir.checkpoint_step_of("step_4²") is None
    assert job_dir.checkpoint_step_of("stage_1") is None
