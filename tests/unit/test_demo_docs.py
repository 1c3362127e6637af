"""The docs cannot drift from the code: docs/site-config.md is what the generator makes from
launcher/site_config.py (every field documented), the README keeps its two commands and its
links resolve, and every code path docs/architecture.md names exists."""

from __future__ import annotations

import dataclasses
import re
import typing
from pathlib import Path

from launcher import site_config
from launcher.site_config_doc import DOC_PATH, field_docs, render

REPO = Path(__file__).resolve().parents[2]


def _sections() -> list[type]:
    found: list[type] = []
    todo: list[type] = [site_config.SiteConfig]
    while todo:
        cls = todo.pop()
        found.append(cls)
        for hint in typing.get_type_hints(cls, vars(site_config)).values():
            for candidate in (hint, *typing.get_args(hint)):
                if (isinstance(candidate, type) and dataclasses.is_dataclass(candidate)
                        and candidate not in found):
                    todo.append(candidate)
    return found


def test_site_config_doc_is_generated_from_the_code() -> None:
    assert DOC_PATH.read_text(encoding="utf-8") == render(), (
        "docs/site-config.md is stale: run `python -m launcher.site_config_doc --write`")


def test_every_site_config_field_has_a_docstring_and_a_row() -> None:
    text = DOC_PATH.read_text(encoding="utf-8")
    sections = _sections()
    assert len(sections) >= 10
    for cls in sections:
        docs = field_docs(cls)
        for f in dataclasses.fields(cls):
            assert docs.get(f.name), f"{cls.__name__}.{f.name} has no docstring"
            assert re.search(rf"\| `([a-z_.\[\]]+\.)?{f.name}` \|", text), f.name


def test_readme_commands_and_links() -> None:
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    assert "bash scripts/demo.sh" in readme and "bash scripts/test.sh" in readme
    links = set(re.findall(r"\]\(([^)#:]+)\)", readme))
    assert {"docs/architecture.md", "docs/site-config.md", "docs/BENCHMARKS.md",
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
