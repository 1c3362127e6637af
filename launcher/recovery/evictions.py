"""Requests that a node leave the running job: written by the health monitor and the straggler
finder, acted on by the trainer, taken by ``gantry recover`` as the culprit.

One file per node, ``<attempt dir>/evictions/<node>.json`` (``{"node", "source", "reason",
"detail", "time", "what"}``), put in place by a hard link of a fully written and fsynced
temp file (launcher/atomic_write.py's ``overwrite=False``): several writers on several
nodes of a shared file system can ask at once, the first request for a node wins and the
others find it there (nothing is appended, nothing torn). ``what`` is the word of the drain
reason ``gantry:run:<what>`` (``health-gpu.xid-79``).

After every step the trainer's rank 0 lists the directory (one ``listdir``, nothing when it
is absent); the ranks agree on it in the same collective as on stop signals
(launcher/train/stop_signals.py), checkpoint that step and exit TRAINER_EVICTED.
"""

from __future__ import annotations

import json
import math
import os
import re
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from launcher.atomic_write import FileExists, write_text
from launcher.errors import UserInputError, brief
from launcher.job_dir import EVICTIONS_DIR

Source = Literal["health", "straggler"]
SOURCES: tuple[str, ...] = ("health", "straggler")
_NODE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}", re.ASCII)
_SUFFIX = ".json"
MAX_REASON = 300
"""Longest reason kept (one line)."""


@dataclass(frozen=True)
class Eviction:
    """One request that ``node`` leave the job."""

    node: str
    source: str
    """``health`` (the node monitor) or ``straggler`` (the slow-rank finder)."""
    reason: str
    """One line for people: what was seen."""
    time: float
    """When it was asked for (the fault time of the recovery)."""
    what: str
    """The drain reason's word: ``<source>-<check or reason>``."""
    detail: dict[str, Any] = field(default_factory=dict)
    """Whatever the requester adds (check, observed, expected, grade ...)."""


def drain_word(source: str, text: str) -> str:
    """``health`` + ``gpu.xid 79`` -> ``health-gpu.xid-79``: a word of gantry's drain reason
    (at most 48 characters)."""
    word = re.sub(r"[^A-Za-z0-9._-]+", "-", text.strip().lower()).strip("-") or "evicted"
    return f"{source}-{word}"[:48].rstrip("-.")


def request_eviction(attempt_dir: Path, node: str, source: str, reason: str,
                     detail: dict[str, Any] | None = None, *, what: str | None = None,
                     now: float | None = None) -> bool:
    """Record that ``node`` must leave the job; True when this call made the request, False
    when one for ``node`` was there already (the first one is kept). ``what``: the drain
    reason's word (default from ``detail["check"]``, else ``reason``). A bad node name,
    source or detail is a UserInputError; a write failure a WriteError."""
    if not _NODE.fullmatch(node):
        raise UserInputError(f"eviction: node {brief(node)} is not allowed (expected a node "
                             "name: letters, digits, '.', '_', '-', at most 64)")
    if source not in SOURCES:
        raise UserInputError(f"eviction: source {brief(source)} is not allowed (expected "
                             f"one of {', '.join(SOURCES)})")
    line = " ".join(reason.split())[:MAX_REASON] or "evicted"
    extra = dict(detail or {})
    check = extra.get("check")
    word = what or drain_word(source, check if isinstance(check, str) and check else line)
    record = {"node": node, "source": source, "reason": line, "what": word,
              "time": time.time() if now is None else now, "detail": extra}
    try:
        text = json.dumps(record, sort_keys=True, allow_nan=False, default=str) + "\n"
    except ValueError as err:
        raise UserInputError(f"eviction: detail of {node} is not JSON ({err})") from None
    directory = attempt_dir / EVICTIONS_DIR
    directory.mkdir(parents=True, exist_ok=True)
    try:
        write_text(directory / f"{node}{_SUFFIX}", text, mode=0o644, overwrite=False)
    except FileExists:
        return False
    return True


def _parse(path: Path) -> Eviction | None:
    try:
        if path.stat().st_size > 65536:
            return None
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):  # UnicodeDecodeError is a ValueError
        return None
    if not isinstance(data, dict):
        return None
    node, source, reason, what, when = (data.get(k) for k in
                                        ("node", "source", "reason", "what", "time"))
    detail = data.get("detail")
    if (not isinstance(node, str) or node != path.name.removesuffix(_SUFFIX)
            or source not in SOURCES or not isinstance(reason, str)
            or not isinstance(what, str) or not what
            or isinstance(when, bool) or not isinstance(when, int | float)
            or not math.isfinite(when)):
        return None
    return Eviction(node, str(source), reason, float(when), what,
                    detail if isinstance(detail, dict) else {})


def pending_evictions(attempt_dir: Path) -> list[Eviction]:
    """Every eviction asked for in ``attempt_dir``, oldest first; empty (one failed
    ``listdir``) when there is none. Damaged or foreign files are skipped."""
    directory = attempt_dir / EVICTIONS_DIR
    try:
        names = os.listdir(directory)
    except OSError:
        return []
    found = [e for name in sorted(names)
             if name.endswith(_SUFFIX) and not name.startswith(".")
             and (e := _parse(directory / name)) is not None]
    return sorted(found, key=lambda e: (e.time, e.node))

