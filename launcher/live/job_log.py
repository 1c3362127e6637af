"""A job's Slurm output (or error) file as `gantry logs` and the Python API give it: whole
(the ranks' labels kept, as `srun --label` users expect), or one rank's lines without their
labels (launcher/step_labels.py reads them; the job directory's request.json names the
scheme its step was launched with)."""

from __future__ import annotations

import codecs
import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from launcher.errors import UserInputError
from launcher.job_dir import JobDir
from launcher.step_labels import SCHEMES, RankFilter, Scheme

CHUNK = 1 << 16
"""Bytes read at a time."""


@dataclass(frozen=True)
class RankLabels:
    """How a job's step labelled its ranks' lines, from its request.json."""

    scheme: Scheme | None
    """None: the job was submitted before gantry labelled them."""
    ranks: int | None
    """World size (None when the record does not say)."""


def rank_labels(job_dir: JobDir) -> RankLabels:
    try:
        request = json.loads(job_dir.request.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        request = {}
    if not isinstance(request, dict):
        request = {}
    scheme = request.get("rank_labels")
    ranks = request.get("ranks")
    return RankLabels(scheme if scheme in SCHEMES else None,
                      ranks if type(ranks) is int and ranks > 0 else None)


def check_rank(job_dir: JobDir, rank: int, flag: str = "--rank") -> Scheme:
    """The scheme to read ``rank``'s lines with; UserInputError (naming ``flag``) when the
    job has no such rank or its log no rank labels."""
    labels = rank_labels(job_dir)
    name = job_dir.job_id or job_dir.path.name
    if labels.scheme is None:
        raise UserInputError(f"{flag} {rank}: job {name}'s log has no rank labels (its step "
                             f"was launched before gantry labelled them: {job_dir.request} "
                             f"names no rank_labels); `gantry logs {name}` prints it whole")
    if rank < 0 or (labels.ranks is not None and rank >= labels.ranks):
        allowed = f"0 to {labels.ranks - 1}" if labels.ranks is not None else "0 or more"
        raise UserInputError(f"{flag} {rank} is not allowed (expected {allowed}: job {name} "
                             f"has {labels.ranks} ranks)")
    return labels.scheme


def rank_filter(job_dir: JobDir, rank: int, flag: str = "--rank") -> RankFilter:
    """A filter of ``rank``'s lines of this job's output (see :func:`check_rank`)."""
    return RankFilter(check_rank(job_dir, rank, flag), rank)


def log_chunks(job_dir: JobDir, job_id: str, stream: str = "out",
               rank: int | None = None) -> Iterator[str]:
    """The job's ``stream`` file (out or err) as text pieces: all of it, or only ``rank``'s
    lines without their labels (checked now, before any is read: UserInputError as
    :func:`check_rank`). Nothing when the file does not exist yet."""
    keep = rank_filter(job_dir, rank) if rank is not None else None
    return _chunks(job_dir.log_file(job_id, stream), keep)


def _chunks(path: Path, keep: RankFilter | None) -> Iterator[str]:
    try:
        handle = path.open("rb")
    except FileNotFoundError:
        return
    decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")  # a character may
    with handle:                                                        # span two chunks
        for chunk in iter(lambda: handle.read(CHUNK), b""):
            text = decoder.decode(chunk)
            yield text if keep is None else keep.feed(text)
    text = decoder.decode(b"", final=True)
    yield text if keep is None else keep.feed(text) + keep.finish()


def read_log(job_dir: JobDir, job_id: str, stream: str = "out",
             rank: int | None = None) -> str:
    """:func:`log_chunks` joined: the whole file, or one rank's lines."""
    return "".join(log_chunks(job_dir, job_id, stream, rank))
