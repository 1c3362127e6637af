"""Per-stage checkpoints: atomic safetensors shards, a manifest of checksums written last, keep-K.

Layout: ``<dir>/step_<N>/stage_<S>.safetensors`` (params under their HF names, AdamW moments
as ``exp_avg.<name>`` / ``exp_avg_sq.<name>``; metadata: step, data position, seed) and
``<dir>/step_<N>/manifest.json`` ({"step", "files": {name: digest}}; piece_hash.py's
``sha256-pieces-<bytes>:<hex>``, or a plain sha256 hex from older writers), which rank 0 writes
after every shard is durable: a directory without a valid manifest is incomplete.
Writes go to a temp file, fsync, rename, fsync of the directory. A write that crashes leaves
a directory without a manifest, which resume ignores and the next manifest write removes.

Resume policy (trainer._pick_checkpoint; each rank verifies its own stages' shards with
:func:`verify`): ``--resume`` takes the newest complete checkpoint whose shards all match the
manifest, skipping (with a warning) newer ones that fail verification; an explicit
``--resume-from DIR`` that fails verification is an error naming the file (exit 2).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import numpy.typing as npt
from safetensors import SafetensorError
from safetensors.numpy import load_file

from launcher.atomic_write import WriteError, as_run_failure, write_bytes
from launcher.errors import UserInputError
from launcher.job_dir import (
    CHECKPOINT_MANIFEST_FILE,
    CHECKPOINT_STEP_GLOB,
    checkpoint_step_dir,
    checkpoint_step_of,
)
from launcher.native.binding import Buffer
from launcher.train import faults, piece_hash
from launcher.train.host_staging import HostStaging
from launcher.train.native_pipeline import Chunk
from launcher.train.safetensors_stream import file_size, write_safetensors
from topology.user_files import require_regular_file

_PREFIX = {Buffer.PARAMS: "", Buffer.ADAM_M: "exp_avg.", Buffer.ADAM_V: "exp_avg_sq."}


def shard_name(stage: int) -> str:
    return f"stage_{stage:03d}.safetensors"


def fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def sha256_of(path: Path) -> str:
    """The whole file's sha256 (the digest of checkpoints written before piece_hash.py)."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def matches(path: Path, recorded: str) -> bool:
    """Whether the file has the digest the manifest recorded for it, in either form (pieces,
    or a whole-file sha256); ValueError when ``recorded`` is neither."""
    piece_bytes = piece_hash.piece_bytes_of(recorded)
    if piece_bytes is None:
        return sha256_of(path) == recorded
    return piece_hash.file_digest(path, piece_bytes) == recorded


Snapshot = dict[str, npt.NDArray[np.float32]]


@dataclass
class WriteTiming:
    """Where one rank's time on a checkpoint went, summed over its shards."""

    bytes: int = 0
    copy_s: float = 0.0
    """Device (or stage) buffers to host memory, on the training loop."""
    write_s: float = 0.0
    """Streaming the shards into their files and the checksum."""
    sync_s: float = 0.0
    """fsync of each file, its rename and the directory's fsync."""


def snapshot_chunk(chunk: Chunk, staging: HostStaging | None = None) -> Snapshot:
    """Views of host copies of one stage's params and AdamW moments (taken between steps;
    writing them can then overlap the next steps): fresh arrays, or ``staging``'s, which the
    next snapshot overwrites."""
    tensors: Snapshot = {}
    for which, prefix in _PREFIX.items():
        buf = chunk.read(which) if staging is None else staging.read(chunk, which)
        for info in chunk.tensors:
            tensors[prefix + info.name] = buf[info.offset : info.offset + info.numel].reshape(
                info.shape)
    return tensors


def write_shard(root: Path, step: int, stage: int, tensors: Snapshot, seed: int,
                rank: int = 0, timing: WriteTiming | None = None) -> tuple[str, str]:
    """Writes one stage shard atomically (temp file, fsync, rename, fsync of the directory),
    streaming the tensors into the file and the checksum (safetensors_stream.py); returns (file
    name, checksum) and adds its bytes and times to ``timing``. The crash fault hook fires
    half-way through the temp file."""
    directory = checkpoint_step_dir(root, step)
    directory.mkdir(parents=True, exist_ok=True)
    meta = {"format": "pt", "step": str(step), "data_position": str(step), "seed": str(seed)}
    path = directory / shard_name(stage)
    tmp = path.with_name(path.name + ".tmp")
    faults.slow_checkpoint()
    with open(tmp, "wb") as handle:
        if faults.crash_point(step, rank):
            write_safetensors(handle, tensors, meta, limit=file_size(tensors, meta) // 2)
            handle.flush()
            os.fsync(handle.fileno())
            faults.crash_now(str(tmp))
        t_write = time.perf_counter()
        digest = write_safetensors(handle, tensors, meta)
        handle.flush()
        t_sync = time.perf_counter()
        os.fsync(handle.fileno())
    os.replace(tmp, path)
    fsync_dir(directory)
    if timing is not None:
        timing.bytes += path.stat().st_size
        timing.write_s += t_sync - t_write
        timing.sync_s += time.perf_counter() - t_sync
    return path.name, digest


def write_manifest(root: Path, step: int, files: dict[str, str], keep: int) -> None:
    """Rank 0, after every shard is written: the completeness marker, then pruning. Only
    steps up to this one are pruned: a newer directory is not this run's (a checkpoint the
    resume skipped as corrupt, a stray copy), and counting it would delete the good ones."""
    directory = checkpoint_step_dir(root, step)
    body = json.dumps({"step": step, "files": files}, indent=2, sort_keys=True).encode()
    try:
        write_bytes(directory / CHECKPOINT_MANIFEST_FILE, body)
    except WriteError as err:
        raise as_run_failure(err) from None
    complete = sorted(s for s in complete_steps(root) if s <= step)
    for old in complete[:-keep] if keep > 0 else []:
        shutil.rmtree(checkpoint_step_dir(root, old), ignore_errors=True)
    remove_incomplete(root, older_than=step)


def remove_incomplete(root: Path, older_than: int) -> list[Path]:
    """Deletes step directories without a manifest (a write that crashed) older than the
    newest complete checkpoint; returns them."""
    removed = []
    for child in root.glob(CHECKPOINT_STEP_GLOB) if root.is_dir() else []:
        step = checkpoint_step_of(child.name)
        if step is not None and step < older_than \
                and not (child / CHECKPOINT_MANIFEST_FILE).is_file():
            shutil.rmtree(child, ignore_errors=True)
            removed.append(child)
    return removed


def complete_steps(root: Path) -> list[int]:
    steps = []
    for child in root.glob(CHECKPOINT_STEP_GLOB) if root.is_dir() else []:
        step = checkpoint_step_of(child.name)
        if step is not None and (child / CHECKPOINT_MANIFEST_FILE).is_file():
            steps.append(step)
    return steps


MAX_MANIFEST_BYTES = 16 * 1024 * 1024
"""A manifest lists one checksum per stage: kilobytes; anything past this is not one."""


def read_manifest(directory: Path) -> tuple[int, dict[str, str]]:
    """(step, {shard name: checksum}) of a checkpoint's manifest; UserInputError naming it when
    it is unreadable, not an object with an integer ``step`` (the directory's own step when
    its name has one) and a ``files`` object of strings."""
    manifest = directory / CHECKPOINT_MANIFEST_FILE
    try:
        require_regular_file(manifest, "the checkpoint's JSON manifest", MAX_MANIFEST_BYTES)
        body = json.loads(manifest.read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError) as err:
        raise UserInputError(f"{manifest}: not a valid checkpoint manifest ({err})") from None
    if not isinstance(body, dict):
        raise UserInputError(f"{manifest}: not a valid checkpoint manifest (expected an object)")
    step, files = body.get("step"), body.get("files")
    expected = checkpoint_step_of(directory.name)
    if not isinstance(step, int) or isinstance(step, bool) or step < 0 or (
            expected is not None and step != expected):
        want = "a step >= 0" if expected is None else f"{expected}, as its directory says"
        raise UserInputError(f"{manifest}: step: {step!r} is not allowed (expected {want})")
    if not isinstance(files, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in files.items()):
        raise UserInputError(f"{manifest}: files: expected an object of shard name -> "
                             "checksum strings")
    return step, dict(files)


def verify(directory: Path, n_stages: int | None,
           stages: Iterable[int] | None = None) -> int:
    """Checks the manifest (an entry for each of the ``n_stages`` shards) and the checksums of
    the shards of ``stages`` (default: all); returns the step or raises naming the bad file.
    Ranks can each check their own stages' shards, in parallel. ``n_stages`` None (no job to
    say): as many as the manifest lists or the directory holds shards, whichever is more, so
    a missing shard and one the manifest does not list both fail."""
    manifest = directory / CHECKPOINT_MANIFEST_FILE
    step, files = read_manifest(directory)
    if n_stages is None:
        n_stages = max(len(files), len(list(directory.glob("stage_*.safetensors"))))
    for stage in range(n_stages):
        name = shard_name(stage)
        if name not in files:
            raise UserInputError(f"{manifest}: no entry for {name} (expected {n_stages} stages)")
    for stage in range(n_stages) if stages is None else sorted(set(stages)):
        name = shard_name(stage)
        path = directory / name
        if not path.is_file():
            raise UserInputError(f"{path}: checkpoint shard is missing")
        try:
            same = matches(path, files[name])
        except ValueError as err:
            raise UserInputError(f"{manifest}: files[{name!r}]: {err}") from None
        except OSError as err:
            raise UserInputError(f"{path}: cannot read the shard ({err.strerror})") from None
        if not same:
            raise UserInputError(f"{path}: checksum mismatch (corrupt or truncated shard)")
    return step


def load_chunk(directory: Path, chunk: Chunk) -> None:
    """Loads params and moments of one stage; wrong names or shapes name the file and tensor."""
    path = directory / shard_name(chunk.stage)
    try:
        tensors = load_file(str(path))
    except (SafetensorError, OSError, ValueError) as err:
        raise UserInputError(f"{path}: unreadable checkpoint shard ({err})") from None
    expected = {prefix + info.name for prefix in _PREFIX.values() for info in chunk.tensors}
    unknown = sorted(set(tensors) - expected)
    if unknown:
        raise UserInputError(f"{path}: unexpected tensor {unknown[0]!r} for stage {chunk.stage}")
    staged = []
    for which, prefix in _PREFIX.items():
        for info in chunk.tensors:
            name = prefix + info.name
            if name not in tensors:
                raise UserInputError(f"{path}: missing tensor {name!r}")
            value = tensors[name]
            if value.dtype != np.float32 or tuple(value.shape) != info.shape:
                raise UserInputError(
                    f"{path}: tensor {name!r} is {value.dtype}{list(value.shape)}, "
                    f"expected float32{list(info.shape)}")
            staged.append((which, info, value))
    for which, info, value in staged:
        chunk.write(which, info.offset, value)
