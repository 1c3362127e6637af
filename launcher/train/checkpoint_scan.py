"""What a checkpoint directory holds, for `gantry checkpoints`: each step_<N> directory, whether
its manifest makes it complete, its shards and bytes, and (on request) whether every shard
still has the checksum its manifest recorded, using the same verification as resume."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from launcher.errors import UserInputError
from launcher.job_dir import CHECKPOINT_MANIFEST_FILE, CHECKPOINT_STEP_GLOB, checkpoint_step_of
from launcher.train import checkpoint


@dataclass(frozen=True)
class CheckpointEntry:
    """One step_<N> directory."""

    step: int
    path: Path
    complete: bool
    """Has a manifest (written last by rank 0)."""
    shards: int
    """Shard files present."""
    bytes: int
    """Bytes of those shards."""
    verified: bool | None
    """Every shard matches the manifest (None: not checked, or not complete)."""
    problem: str | None
    """Why it is not usable: no manifest, or the verification error."""

    def to_json(self) -> dict[str, Any]:
        return {**self.__dict__, "path": str(self.path)}


def scan(root: Path, verify: bool = False) -> list[CheckpointEntry]:
    """The step directories under ``root``, by step."""
    if not root.is_dir():
        raise UserInputError(f"{root}: no such checkpoint directory")
    found = [(step, child) for child in root.glob(CHECKPOINT_STEP_GLOB)
             if child.is_dir() and (step := checkpoint_step_of(child.name)) is not None]
    entries = []
    for step, child in sorted(found):
        shards = sorted(child.glob("stage_*.safetensors"))
        size = sum(p.stat().st_size for p in shards if p.is_file())  # a dangling link: 0
        complete = (child / CHECKPOINT_MANIFEST_FILE).is_file()
        verified: bool | None = None
        problem = None if complete else "no manifest (a write that did not finish)"
        if complete and verify:
            try:
                checkpoint.verify(child, None)
                verified = True
            except UserInputError as err:
                verified, problem = False, str(err)
        entries.append(CheckpointEntry(step, child, complete, len(shards), size, verified,
                                       problem))
    return entries


def resume_choice(entries: list[CheckpointEntry]) -> CheckpointEntry | None:
    """The checkpoint `gantry train --resume` would take: the newest complete one that did not
    fail verification (when verified, the same as resume's own choice)."""
    usable = [e for e in entries if e.complete and e.verified is not False]
    return usable[-1] if usable else None
