"""A job's log text: what `gantry logs JOB` prints and the Python API's ``Job.logs()`` returns
(one reader for both)."""

from __future__ import annotations

import codecs
from pathlib import Path
from typing import IO

from launcher.errors import GantryError
from launcher.job_dir import JobDir

LOG_STREAMS = ("out", "err")
"""The Slurm output file and error file of a job."""


def job_log_path(job_dir: JobDir, stream: str = "out") -> Path:
    """The job's Slurm ``stream`` file (one of :data:`LOG_STREAMS`; ``%j`` expanded);
    GantryError for a job never submitted."""
    if stream not in LOG_STREAMS:
        raise ValueError(f"stream {stream!r} (expected one of {', '.join(LOG_STREAMS)})")
    job_id = job_dir.job_id
    if job_id is None:
        raise GantryError(f"{job_dir.path}: the job was never submitted (no job id)")
    return job_dir.log_file(job_id, stream)


def write_log(job_dir: JobDir, out: IO[str], stream: str = "out",
              rank: int | None = None) -> bool:
    """Copy the job's Slurm ``stream`` file (every attempt's, appended across requeues) to
    ``out``, bytes that are not UTF-8 replaced, or with ``rank`` only that rank's lines
    without their labels (launcher/live/job_log.py; a rank the job does not have is a
    UserInputError); False when it does not exist yet (the job may be pending)."""
    path = job_log_path(job_dir, stream)
    if rank is not None:
        from launcher.live.job_log import log_chunks

        chunks = log_chunks(job_dir, job_dir.job_id or "", stream, rank)
        if not path.exists():
            return False
        for text in chunks:
            out.write(text)
        return True
    try:
        handle = path.open("rb")
    except FileNotFoundError:
        return False
    decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
    with handle:
        for chunk in iter(lambda: handle.read(1 << 16), b""):
            out.write(decoder.decode(chunk))  # a character split between chunks stays whole
    out.write(decoder.decode(b"", final=True))
    return True
