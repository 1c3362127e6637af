"""Reads of files that only grow, taking only the bytes appended since the last read: the run
monitor rewrites its node's textfile every sample from a job's logs and JSONL records.

A :class:`Fold` turns a file's lines into items: ``step(state, line)`` gives the next state
and the line's item (None: the line gives none); the state carries what one line tells the
next (the log's restart count) and is a value, never changed in place. :func:`fold_lines`
runs a fold over a file's lines. With a :class:`ReadCache`, the cache keeps per file and
fold: (st_dev, st_ino), the offset just after the last complete line read, the last bytes
before that offset, the fold's state there and the items so far; the next read takes only
the bytes after the offset. Their complete lines are folded and kept; the last line, while
it has no newline yet (half-written), is folded on the kept state at every read and kept by
none. So a read gives exactly what a fold over the whole file gives at that moment. A file
of another inode, shorter than the offset, or whose bytes before the offset changed is read
again from the start; a missing (unreadable) file gives no items and is forgotten.

Lines are those of ``Path.read_text(encoding="utf-8", errors="replace").splitlines()``: the
bytes are split after each newline before decoding, which decodes and splits them as the
whole text would be (a newline byte is never inside a UTF-8 sequence, and "\\r\\n" cannot
straddle a cut made after "\\n").

Files written once and replaced only by rename (rank start records) are read once per inode:
:meth:`ReadCache.once`.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any, Generic, TypeVar

S = TypeVar("S")
T = TypeVar("T")

BLOCK = 8 << 20
"""Bytes read at a time (a long file's first read does not hold it whole)."""
GUARD = 64
"""Bytes before the offset kept and compared at the next read (a file rewritten in place)."""


class Fold(Generic[S, T]):
    """How a file's lines become items: ``step(state, line) -> (state, item or None)``,
    from ``start``. ``name`` tells folds of one file apart in a cache."""

    __slots__ = ("name", "start", "step")

    def __init__(self, name: str, start: S, step: Callable[[S, str], tuple[S, T | None]]) -> None:
        self.name = name
        self.start = start
        self.step = step


class _Cursor:
    """What one fold read of one file so far."""

    __slots__ = ("dev", "guard", "ino", "items", "offset", "state")

    def __init__(self, dev: int, ino: int, state: Any) -> None:
        self.dev = dev
        self.ino = ino
        self.offset = 0
        self.guard = b""
        self.state = state
        self.items: list[Any] = []


class ReadCache:
    """What earlier reads of files parsed, by path and fold; one per long-lived reader (the
    run monitor keeps one for its lifetime). Not shared between threads."""

    def __init__(self) -> None:
        self._cursors: dict[tuple[str, str], _Cursor] = {}
        self._once: dict[tuple[str, str], tuple[int, Any]] = {}

    def once(self, path: Path, inode: int, kind: str, parse: Callable[[Path], T]) -> T:
        """``parse(path)``, read again only when the file's inode is not the one it was read
        at (``inode``: from the directory listing, ``os.DirEntry.inode()``, so no stat)."""
        key = (str(path), kind)
        known = self._once.get(key)
        if known is not None and known[0] == inode:
            value: T = known[1]
            return value
        value = parse(path)
        self._once[key] = (inode, value)
        return value

    def __len__(self) -> int:
        """Files it holds a state of."""
        return len(self._cursors) + len(self._once)


def fold_lines(path: Path, fold: Fold[S, T], cache: ReadCache | None = None,
               limit: int | None = None) -> list[T]:
    """The items of ``fold`` over the lines of ``path`` (within its first ``limit`` bytes, if
    given), in file order; [] when it cannot be read. With ``cache``, only what was appended
    since the cache's last read of it is read (the module docstring)."""
    key = (str(path), fold.name)
    cursors = cache._cursors if cache is not None else None
    known = cursors.get(key) if cursors is not None else None
    try:
        with open(path, "rb") as handle:
            info = os.fstat(handle.fileno())
            cursor = known if known is not None and _same(known, info, handle) else None
            if cursor is None:
                cursor = _Cursor(info.st_dev, info.st_ino, fold.start)
                handle.seek(0)
            tail = _advance(cursor, handle, fold, limit)
    except OSError:
        if cursors is not None:
            cursors.pop(key, None)
        return []
    if cursors is None:  # a one-off read: its list is the caller's
        cursor.items.extend(_fold_tail(cursor.state, tail, fold))
        return cursor.items
    cursors[key] = cursor
    return [*cursor.items, *_fold_tail(cursor.state, tail, fold)]


def _same(cursor: _Cursor, info: os.stat_result, handle: Any) -> bool:
    """The file is the one ``cursor`` read and still holds what it read (its size and the
    bytes before the offset); the handle is left at the offset."""
    if (info.st_dev, info.st_ino) != (cursor.dev, cursor.ino) or info.st_size < cursor.offset:
        return False
    handle.seek(cursor.offset - len(cursor.guard))
    return bool(handle.read(len(cursor.guard)) == cursor.guard)


def _advance(cursor: _Cursor, handle: Any, fold: Fold[Any, Any], limit: int | None) -> bytes:
    """Fold the complete lines after the cursor's offset into it; returns the bytes after the
    last newline (the half-written last line, or b"")."""
    pending = bytearray()
    position = cursor.offset
    while limit is None or position < limit:
        block = handle.read(BLOCK if limit is None else min(BLOCK, limit - position))
        if not block:
            break
        position += len(block)
        pending += block
        cut = pending.rfind(b"\n") + 1
        if cut:
            _commit(cursor, bytes(pending[:cut]), fold)
            del pending[:cut]
    return bytes(pending)


def _commit(cursor: _Cursor, data: bytes, fold: Fold[Any, Any]) -> None:
    state, items, step = cursor.state, cursor.items, fold.step
    for line in data.decode("utf-8", errors="replace").splitlines():
        state, item = step(state, line)
        if item is not None:
            items.append(item)
    cursor.state = state
    cursor.offset += len(data)
    cursor.guard = (cursor.guard + data[-GUARD:])[-GUARD:]


def _fold_tail(state: S, tail: bytes, fold: Fold[S, T]) -> list[T]:
    """The items of the half-written last line, folded on a copy of the state."""
    found = []
    for line in tail.decode("utf-8", errors="replace").splitlines() if tail else ():
        state, item = fold.step(state, line)
        if item is not None:
            found.append(item)
    return found
