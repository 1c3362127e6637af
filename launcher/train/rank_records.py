"""Per-rank records in the attempt directory: where each rank runs, that it is alive, how it ended.

``$GANTRY_ATTEMPT_DIR/ranks/`` holds, per world rank R (from the launcher's environment, so
the records exist before MPI starts):

- ``R.start``: ``{"rank", "node", "pid", "time"}``, written once at process start;
- ``R.beat``: ``{"rank", "node", "time", "beats", "phase"}``, rewritten by the watchdog's
  thread every :data:`BEAT_INTERVAL_S` (proof of life: a rank killed, or stopped with
  SIGSTOP, stops rewriting it) and ``beats`` counts the progress calls the rank made (every
  rank makes the same sequence, so a rank behind its peers has fewer);
- ``R.exit``: ``{"rank", "node", "code", "time", "why"}``, written on the way out by
  every path that can (normal return, error, watchdog, fault hooks); a rank killed by a
  signal writes none.

``gantry recover`` reads them (``read_ranks``) to name the node a failure came from. Beats
are replaced by rename without fsync: they only need to be current while the step runs.
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from launcher.atomic_write import WriteError, write_text
from launcher.job_dir import ATTEMPT_DIR_ENV, RANKS_DIR

BEAT_INTERVAL_S = 1.0
"""How often a live rank rewrites its beat."""
RANK_ENV = ("SLURM_PROCID", "OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK")
"""Where a rank finds its world rank before MPI starts, in this order."""


def rank_from_env(env: dict[str, str] | None = None) -> int | None:
    """This process's world rank as its launcher set it; None when run alone."""
    source = os.environ if env is None else env
    for key in RANK_ENV:
        value = source.get(key, "")
        if value.isascii() and value.isdigit():
            return int(value)
    return None


def _write_quick(path: Path, text: str) -> None:
    """Replace ``path`` by rename, without fsync (a beat only matters while the step runs)."""
    temp = path.with_name(f".{path.name}.tmp")
    with open(temp, "w", encoding="utf-8") as handle:
        handle.write(text)
    os.replace(temp, path)


class RankRecords:
    """The records of one rank; every write failure is ignored (records are evidence for
    recovery, never a reason for training to fail)."""

    def __init__(self, attempt_dir: Path, rank: int, node: str) -> None:
        self.directory = attempt_dir / RANKS_DIR
        self.rank = rank
        self.node = node
        self._beats = 0
        self._phase = "start"
        self._last_beat = 0.0
        self._ended = False

    def _path(self, suffix: str) -> Path:
        return self.directory / f"{self.rank}.{suffix}"

    def started(self) -> None:
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
            write_text(self._path("start"), json.dumps({
                "rank": self.rank, "node": self.node, "pid": os.getpid(),
                "time": time.time()}) + "\n")
        except (OSError, WriteError):
            pass
        self.alive(force=True)

    def progress(self, phase: str) -> None:
        """The rank made progress (the watchdog's beat): counted, shown in the next beat."""
        self._beats += 1
        self._phase = phase

    def alive(self, force: bool = False) -> None:
        """Rewrite the beat when BEAT_INTERVAL_S passed since the last one (or ``force``)."""
        now = time.time()
        if not force and now - self._last_beat < BEAT_INTERVAL_S:
            return
        self._last_beat = now
        with contextlib.suppress(OSError):
            _write_quick(self._path("beat"), json.dumps({
                "rank": self.rank, "node": self.node, "time": now, "beats": self._beats,
                "phase": self._phase}) + "\n")

    def ended(self, code: int, why: str = "") -> None:
        """Record the exit status (once: the first path out wins)."""
        if self._ended:
            return
        self._ended = True
        with contextlib.suppress(OSError, WriteError):
            write_text(self._path("exit"), json.dumps({
                "rank": self.rank, "node": self.node, "code": code, "time": time.time(),
                "why": why[:500]}) + "\n")


_CURRENT: RankRecords | None = None


def install(records: RankRecords | None) -> None:
    """Make ``records`` the process's own (for the exit paths that ``_exit``)."""
    global _CURRENT
    _CURRENT = records


def current() -> RankRecords | None:
    return _CURRENT


def record_exit(code: int, why: str = "") -> None:
    """The process is about to exit with ``code``: record it when records are installed."""
    if _CURRENT is not None:
        _CURRENT.ended(code, why)


def start_from_env() -> RankRecords | None:
    """Records for this rank when it runs in an attempt ($GANTRY_ATTEMPT_DIR) under a
    launcher that sets its rank; installed and started. None otherwise."""
    from launcher.train.layout import node_name

    attempt = os.environ.get(ATTEMPT_DIR_ENV)
    rank = rank_from_env()
    if not attempt or rank is None:
        return None
    records = RankRecords(Path(attempt), rank, node_name())
    install(records)
    records.started()
    return records


# ------------------------------------------------------------------------------- reading --

@dataclass(frozen=True)
class RankState:
    """What the records say about one rank."""

    rank: int
    node: str | None
    """From the start record (else the beat or exit record)."""
    started: float | None
    beat_time: float | None
    """When it last proved it was alive."""
    beats: int
    phase: str
    exit_code: int | None
    """None: no exit record (killed by a signal, or still running)."""
    exit_time: float | None
    why: str


def _read(path: Path) -> dict[str, Any] | None:
    try:
        if path.stat().st_size > 65536:
            return None
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError, UnicodeDecodeError):
        return None
    return data if isinstance(data, dict) else None


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value)


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


def read_ranks(attempt_dir: Path) -> dict[int, RankState]:
    """Every rank's records in ``attempt_dir``; unreadable files count as absent."""
    directory = attempt_dir / RANKS_DIR
    try:
        names = sorted(p.name for p in directory.iterdir())
    except OSError:
        return {}
    ranks = sorted({int(n.split(".")[0]) for n in names
                    if n.split(".")[0].isascii() and n.split(".")[0].isdigit()})
    states: dict[int, RankState] = {}
    for rank in ranks[:100_000]:
        start = _read(directory / f"{rank}.start") or {}
        beat = _read(directory / f"{rank}.beat") or {}
        end = _read(directory / f"{rank}.exit") or {}
        code = end.get("code")
        states[rank] = RankState(
            rank=rank,
            node=_text(start.get("node")) or _text(beat.get("node")) or _text(end.get("node")),
            started=_number(start.get("time")),
            beat_time=_number(beat.get("time")),
            beats=int(b) if (b := _number(beat.get("beats"))) is not None else 0,
            phase=_text(beat.get("phase")) or "",
            exit_code=code if isinstance(code, int) and not isinstance(code, bool) else None,
            exit_time=_number(end.get("time")),
            why=_text(end.get("why")) or "",
        )
    return states


def stalled_ranks(states: dict[int, RankState], now: float,
                  stale_after_s: float = 3 * BEAT_INTERVAL_S + 2.0) -> list[int]:
    """Ranks that stopped proving they are alive (killed, stopped, their node gone), else
    those behind their peers in progress; empty when every rank looks the same. Ranks that
    exited are not counted."""
    running = {r: s for r, s in states.items() if s.exit_code is None}
    silent = [r for r, s in running.items()
              if s.beat_time is None or now - s.beat_time > stale_after_s]
    if silent and len(silent) < len(running):
        return sorted(silent)
    if len(running) < 2:
        return []
    least = min(s.beats for s in running.values())
    behind = [r for r, s in running.items() if s.beats == least]
    return sorted(behind) if len(behind) < len(running) else []
