"""The generated pages: where each lives and the function that renders it."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from launcher.reference_doc import environment_page, job_page, site_page

PAGES: tuple[tuple[Path, Callable[[], str]], ...] = (
    (site_page.PATH, site_page.render),
    (job_page.PATH, job_page.render),
    (environment_page.PATH, environment_page.render),
)
"""(page path, renderer) for every page of docs/reference/."""


def stale() -> list[Path]:
    """The pages whose file differs from what the code renders now (or is missing)."""
    return [path for path, render in PAGES
            if not path.is_file() or path.read_text(encoding="utf-8") != render()]
