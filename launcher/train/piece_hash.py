"""The checksum of a checkpoint shard: sha256 over the sha256s of its fixed-size pieces,
hashed on several cores at once.

One sha256 over a whole file runs on one core (~1.4 GB/s with SHA-NI on the dev VM, ~1.3 on
the H200 node), which would make hashing the longest part of writing a 4.3 GB shard
(docs/BENCHMARKS.md, "Checkpoint verify"). Here the file's bytes are cut into pieces of
``piece_bytes`` (the last one shorter), each piece's sha256 is computed on a thread pool
(hashlib releases the GIL), and the digest is the sha256 of the pieces' 32-byte digests in
order, written ``sha256-pieces-<piece_bytes>:<hex>``. It is recomputed from a file with
:func:`file_digest`, or by hand: split -b <piece_bytes>, sha256 each part, hash the
concatenated binary digests.
"""

from __future__ import annotations

import hashlib
import os
import re
from collections import deque
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

PIECE_BYTES = 64 << 20
PREFIX = "sha256-pieces-"


def _workers() -> int:
    """Threads to hash with: the cores this process may run on (Slurm binds ranks), <= 16."""
    affinity = getattr(os, "sched_getaffinity", None)
    cores = len(affinity(0)) if affinity is not None else (os.cpu_count() or 1)
    return max(1, min(16, cores))


def _hash_segments(segments: list[memoryview]) -> bytes:
    digest = hashlib.sha256()
    for segment in segments:
        digest.update(segment)
    return digest.digest()


def _combine(piece_digests: Iterator[bytes], piece_bytes: int) -> str:
    top = hashlib.sha256()
    for piece in piece_digests:
        top.update(piece)
    return f"{PREFIX}{piece_bytes}:{top.hexdigest()}"


class PieceHasher:
    """Feed the file's bytes in order (views, any sizes), then :meth:`hexdigest`. Pieces are
    hashed in the background as they fill; the fed views must stay unchanged until then."""

    def __init__(self, piece_bytes: int = PIECE_BYTES) -> None:
        if piece_bytes < 1:
            raise ValueError(f"piece_bytes {piece_bytes} is not allowed (expected >= 1)")
        self.piece_bytes = piece_bytes
        self._pool = ThreadPoolExecutor(_workers(), thread_name_prefix="gantry-hash")
        self._futures: list[Future[bytes]] = []
        self._segments: list[memoryview] = []
        self._filled = 0

    def feed(self, view: memoryview) -> None:
        view = view.cast("B") if view.ndim != 1 or view.format != "B" else view
        while len(view):
            take = min(len(view), self.piece_bytes - self._filled)
            self._segments.append(view[:take])
            self._filled += take
            view = view[take:]
            if self._filled == self.piece_bytes:
                self._submit()

    def _submit(self) -> None:
        self._futures.append(self._pool.submit(_hash_segments, self._segments))
        self._segments, self._filled = [], 0

    def hexdigest(self) -> str:
        if self._filled:
            self._submit()
        try:
            return _combine((f.result() for f in self._futures), self.piece_bytes)
        finally:
            self._pool.shutdown(wait=True)

    def close(self) -> None:
        """Stops hashing (on an error path; :meth:`hexdigest` closes by itself)."""
        self._pool.shutdown(wait=True, cancel_futures=True)


_READ_BYTES = 8 << 20
"""Bytes per read while hashing a file's piece (what each thread holds in memory)."""


def _hash_file_piece(fd: int, offset: int, length: int) -> bytes:
    digest = hashlib.sha256()
    end = offset + length
    while offset < end:
        block = os.pread(fd, min(_READ_BYTES, end - offset), offset)
        if not block:
            break
        digest.update(block)
        offset += len(block)
    return digest.digest()


def file_digest(path: Path, piece_bytes: int = PIECE_BYTES) -> str:
    """The digest of a file already written: each piece read (positioned reads, 8 MiB at a
    time) and hashed by the pool's threads, so reading runs in parallel too; at most two
    pieces per thread are queued at a time."""
    fd = os.open(path, os.O_RDONLY)
    try:
        size = os.fstat(fd).st_size
        workers = _workers()
        digests: list[bytes] = []
        with ThreadPoolExecutor(workers, thread_name_prefix="gantry-hash") as pool:
            window: deque[Future[bytes]] = deque()
            for start in range(0, size, piece_bytes):
                window.append(pool.submit(_hash_file_piece, fd, start,
                                          min(piece_bytes, size - start)))
                if len(window) >= 2 * workers:
                    digests.append(window.popleft().result())
            digests.extend(f.result() for f in window)
        return _combine(iter(digests), piece_bytes)
    finally:
        os.close(fd)


MIN_RECORDED_PIECE_BYTES = 4096
"""The smallest piece size a manifest may name (smaller ones would mean millions of hashing
tasks for one shard)."""
_RECORDED = re.compile(r"sha256-pieces-([1-9][0-9]*):([0-9a-f]{64})", re.ASCII)
_WHOLE_FILE = re.compile(r"[0-9a-f]{64}", re.ASCII)


def piece_bytes_of(recorded: str) -> int | None:
    """The piece size a recorded digest names, or None when it is a whole-file sha256 (64
    lowercase hex digits: checkpoints written before the piecewise digest). Raises ValueError
    when it is neither, or names pieces under MIN_RECORDED_PIECE_BYTES."""
    match = _RECORDED.fullmatch(recorded)
    if match is not None and int(match.group(1)) >= MIN_RECORDED_PIECE_BYTES:
        return int(match.group(1))
    if match is None and _WHOLE_FILE.fullmatch(recorded):
        return None
    raise ValueError(f"{recorded!r} is not a checkpoint digest (expected "
                     f"'{PREFIX}<bytes >= {MIN_RECORDED_PIECE_BYTES}>:<64 hex digits>' or 64 "
                     f"hex digits)")
