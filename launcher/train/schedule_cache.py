"""The schedule table of a job, built once: world rank 0 reads it from the job directory's
cache or generates it (and stores it), the other ranks get its bytes by broadcast.

Cache file: ``$GANTRY_JOB_DIR/schedules/<name>-pp<pp>-m<m>-v<v>-<generator>.gsch`` (the
generator key: gantry's version, the table format's and a digest of the generators' source,
so a changed generator never reads an old table): the table's ``to_bytes()`` followed by its
SHA-256, written through launcher/atomic_write.py. A file that does not check out (digest,
blob format, or a layout other than its name's) is never used: a one-line warning names it
and why, and the table is generated again and the file replaced. A cache that cannot be
written (read-only or full file system) costs a warning, not the run. Without
``GANTRY_JOB_DIR`` (``gantry train`` run by hand) nothing is cached.
"""

from __future__ import annotations

import functools
import hashlib
import os
import sys
from pathlib import Path

from launcher import __version__, schedules
from launcher.atomic_write import WriteError, write_bytes
from launcher.job_dir import JOB_DIR_ENV, SCHEDULES_DIR
from launcher.schedules import ScheduleError, ScheduleTable, generate, table_from_bytes
from launcher.schedules.table import TABLE_FORMAT_VERSION

_DIGEST = hashlib.sha256().digest_size
_MAX_BYTES = 1 << 31
"""A cache file larger than this is not read (no table of a real layout comes near it)."""


def cache_path(job_dir: Path, name: str, pp: int, m: int, v: int) -> Path:
    """Where the table of this layout is cached (the key is in the name)."""
    return job_dir / SCHEDULES_DIR / f"{name}-pp{pp}-m{m}-v{v}-{generator_key()}.gsch"


@functools.cache
def generator_key() -> str:
    """gantry's version, the table format's, and 12 hex digits of the generators' source
    (the Python and the C of the compiled search)."""
    digest = hashlib.sha256()
    home = Path(schedules.__file__).parent
    for source in sorted([*home.glob("*.py"), *home.glob("*.c")]):
        digest.update(source.name.encode() + b"\0" + source.read_bytes())
    return f"g{__version__}-t{TABLE_FORMAT_VERSION}-{digest.hexdigest()[:12]}"


def job_dir_from_env() -> Path | None:
    value = os.environ.get(JOB_DIR_ENV)
    return Path(value) if value else None


def table_bytes(name: str, pp: int, m: int, v: int, job_dir: Path | None) -> bytes:
    """The table's bytes: from the cache when it checks out, else generated (and cached).
    ScheduleError when the layout has no table."""
    path = cache_path(job_dir, name, pp, m, v) if job_dir is not None else None
    if path is not None:
        cached = _read(path, name, pp, m, v)
        if cached is not None:
            return cached
    blob = generate(name, pp, m, v).to_bytes()
    if path is not None:
        try:
            path.parent.mkdir(exist_ok=True)
            write_bytes(path, blob + hashlib.sha256(blob).digest(), label="schedule cache")
        except WriteError as err:
            _warn(f"{path}: schedule table not cached ({err})")
        except OSError as err:
            _warn(f"{path}: schedule table not cached ({err.strerror or err})")
    return blob


def load(blob: bytes, name: str) -> ScheduleTable:
    """The table from bytes :func:`table_bytes` returned (on any rank)."""
    return table_from_bytes(blob, name)


def _read(path: Path, name: str, pp: int, m: int, v: int) -> bytes | None:
    """The cached blob, or None (missing: silently; bad: with a warning)."""
    try:
        if path.stat().st_size > _MAX_BYTES:
            _warn(f"{path}: schedule cache larger than {_MAX_BYTES} bytes; rebuilt")
            return None
        data = path.read_bytes()
    except FileNotFoundError:
        return None
    except OSError as err:
        _warn(f"{path}: schedule cache unreadable ({err.strerror or err}); rebuilt")
        return None
    blob, digest = data[:-_DIGEST], data[-_DIGEST:]
    if len(data) <= _DIGEST or hashlib.sha256(blob).digest() != digest:
        _warn(f"{path}: schedule cache does not match its digest; rebuilt")
        return None
    try:
        table = table_from_bytes(blob, name)
    except ScheduleError as err:
        _warn(f"{path}: schedule cache is not a table ({err}); rebuilt")
        return None
    got = (table.pp, table.micro_batches, table.virtual_stages)
    if got != (pp, m, v) or len(table.slots_per_stage) != pp * v:
        _warn(f"{path}: schedule cache holds pp={got[0]} m={got[1]} v={got[2]}, "
              f"not pp={pp} m={m} v={v}; rebuilt")
        return None
    return blob


def _warn(message: str) -> None:
    sys.stderr.write(f"warning: {message}\n")
    sys.stderr.flush()
