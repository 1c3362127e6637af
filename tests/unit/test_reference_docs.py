"""docs/reference/ cannot drift from the code: every page is what its generator
(launcher/reference_doc/) makes now, every field of the site config and the job spec has a
row, and every site config field has a docstring."""

from __future__ import annotations

import dataclasses
import re
import typing
from pathlib import Path

import pytest

from launcher import site_config
from launcher.job_spec import JobSpec
from launcher.reference_doc import job_page, site_page
from launcher.reference_doc.__main__ import main
from launcher.reference_doc.fields import field_docs, type_hints, undocumented
from launcher.reference_doc.pages import PAGES, stale

JOB_FIELDS_WITHOUT_DOCSTRING = {
    "JobSpec.name", "JobSpec.model", "JobSpec.parallelism", "JobSpec.train",
    "JobSpec.resources", "JobSpec.checkpoint", "JobSpec.policy", "TrainSpec.beta1",
    "TrainSpec.beta2", "TrainSpec.eps", "ResourcesSpec.account", "ResourcesSpec.qos",
}
"""Job spec fields that have no docstring yet (a section field shows its class's docstring);
a new field needs one."""


def _sections(root: type) -> list[type]:
    found: list[type] = []
    todo: list[type] = [root]
    while todo:
        cls = todo.pop()
        found.append(cls)
        for hint in type_hints(cls).values():
            for candidate in (hint, *typing.get_args(hint)):
                if (isinstance(candidate, type) and dataclasses.is_dataclass(candidate)
                        and candidate not in found):
                    todo.append(candidate)
    return found


@pytest.mark.parametrize("path,render", PAGES, ids=[path.name for path, _ in PAGES])
def test_page_is_generated_from_the_code(path: Path, render: typing.Callable[[], str]) -> None:
    assert path.read_text(encoding="utf-8") == render(), (
        f"{path.name} is stale: run `python -m launcher.reference_doc --write`")


def _rows_for_every_field(root: type, text: str) -> int:
    sections = _sections(root)
    for cls in sections:
        for f in dataclasses.fields(cls):
            assert re.search(rf"\| `([a-z_.\[\]]+\.)?{f.name}` \|", text), f.name
    return len(sections)


def test_every_site_config_field_has_a_docstring_and_a_row() -> None:
    assert _rows_for_every_field(site_config.SiteConfig,
                                 site_page.PATH.read_text(encoding="utf-8")) >= 10
    assert undocumented(site_config.SiteConfig) == []
    for cls in _sections(site_config.SiteConfig):
        assert set(field_docs(cls)) == {f.name for f in dataclasses.fields(cls)}, cls


def test_every_job_spec_field_has_a_row_and_new_ones_a_docstring() -> None:
    assert _rows_for_every_field(JobSpec, job_page.PATH.read_text(encoding="utf-8")) == 7
    missing = set(undocumented(JobSpec))
    assert missing <= JOB_FIELDS_WITHOUT_DOCSTRING, (
        f"give these job spec fields a docstring: {sorted(missing - JOB_FIELDS_WITHOUT_DOCSTRING)}")


def test_stale_and_missing_pages_are_named(tmp_path: Path,
                                            monkeypatch: pytest.MonkeyPatch,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    pages = ((tmp_path / "reference" / "a.md", lambda: "a\n"),
             (tmp_path / "reference" / "b.md", lambda: "b\n"))
    monkeypatch.setattr("launcher.reference_doc.pages.PAGES", pages)
    monkeypatch.setattr("launcher.reference_doc.__main__.PAGES", pages)
    monkeypatch.setattr("launcher.reference_doc.__main__.REPO_ROOT", tmp_path)
    assert stale() == [path for path, _ in pages]
    assert main([]) == 1
    assert "reference/a.md is stale" in capsys.readouterr().err
    assert main(["--write"]) == 0
    assert [path.read_text(encoding="utf-8") for path, _ in pages] == ["a\n", "b\n"]
    assert stale() == [] and main([]) == 0
    pages[1][0].write_text("changed\n", encoding="utf-8")
    assert stale() == [pages[1][0]]
