"""The docs cannot drift from the code: the README keeps its two commands and its links resolve,
and every code path docs/architecture.md names exists (the generated pages of docs/reference/
are checked by tests/unit/test_reference_docs.py)."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_readme_commands_and_links() -> None:
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    assert "bash scripts/demo.sh" in readme and "bash scripts/test.sh" in readme
    links = set(re.findall(r"\]\(([^)#:]+)\)", readme))
    assert {"docs/architecture.md", "docs/reference/site-config.md",
            "docs/reference/job-spec.md", "docs/BENCHMARKS.md",
            "docs/RELIABILITY.md"} <= links
    missing = {link for link in links if not (REPO / link).exists()}
    assert not missing, missing


def test_architecture_names_only_existing_paths() -> None:
    text = (REPO / "docs" / "architecture.md").read_text(encoding="utf-8")
    paths = set(re.findall(r"\b((?:launcher|topology|native|sbatch_templates|tests|bench)"
                           r"/[A-Za-z0-9_./]*[A-Za-z0-9_/])", text))
    assert len(paths) > 30
    missing = {p for p in paths if not (REPO / p.rstrip("/")).exists()}
    assert not missing, missing
