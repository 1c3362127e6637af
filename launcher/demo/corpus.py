"""The demo's training text: documents shipped in the repository (README, docs, site configs,
batch-script templates), each one document for `gantry data`."""

from __future__ import annotations

from pathlib import Path

from launcher.errors import GantryError

PATTERNS = ("README.md", "docs/*.md", "site_configs/*.yaml", "sbatch_templates/*.j2",
            "sbatch_templates/launch/*.j2")
"""Globs under the repository root, in order."""
MIN_BYTES = 20_000
"""Less text than this and the loss curve says little."""


def corpus_files(repo: Path) -> list[Path]:
    """The text files, sorted within each pattern; GantryError when the checkout lacks them."""
    files: list[Path] = []
    for pattern in PATTERNS:
        files += sorted(p for p in repo.glob(pattern) if p.is_file())
    size = sum(p.stat().st_size for p in files)
    if size < MIN_BYTES:
        raise GantryError(f"{repo}: only {size} bytes of text in {', '.join(PATTERNS)} (the demo "
                          f"trains on the repository's own docs; expected >= {MIN_BYTES})")
    return files
