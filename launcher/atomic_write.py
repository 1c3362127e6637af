"""Every file gantry writes goes through here: a temp file beside it, fsync, rename, fsync of
the directory. A failure (disk full, a file over the size limit, a value that is not UTF-8, a
name the file system refuses) leaves the previous file as it was and no temp file behind.

- ``write_text`` / ``write_bytes``: one file.
- ``open_atomic``: one file streamed through a binary handle (large outputs).
- ``FileSet``: several files written together (a report, the health check scripts): all are
  written and fsynced under temp names first, then renamed into place, so a failure while
  writing any of them changes none.
- ``made_directories``: ``mkdir -p`` that removes again what it made when the block fails.

Modes: ``mode=None`` keeps the permission bits of the file being replaced, and a new file
gets the process's default (0o666 less the umask); an explicit ``mode`` (0o755 for scripts)
is set exactly. A symbolic link at the path is followed: its target is replaced. With
``overwrite=False`` nothing may be at the path yet, a link included: the file is hard-linked
into place, which fails if the name appeared meanwhile (on a file system without hard links,
renamed after a last check).
Failures are a ``WriteError`` (a one-line UserInputError naming the file); what a training
run writes turns it into a plain failure (``as_run_failure``: exit 1, the job may retry).
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

from launcher.errors import GantryError, UserInputError, brief

_TEMP_SUFFIX = ".tmp"
_MAX_NAME_BYTES = 255
_NO_DIR_SYNC = frozenset({errno.EINVAL, errno.ENOTSUP, errno.EOPNOTSUPP, errno.EBADF})
"""Errors of fsync on a directory from file systems that cannot sync one (not a failure)."""
_NO_HARD_LINKS = frozenset({errno.EPERM, errno.ENOTSUP, errno.EOPNOTSUPP, errno.EXDEV})
"""Errors of link() from file systems without hard links."""


class WriteError(UserInputError):
    """A file could not be written; nothing was left half-written (exit 2, one line)."""

    def __init__(self, path: Path, reason: str, label: str | None = None,
                 what: str = "cannot write") -> None:
        self.path = path
        self.reason = reason
        self.label = label
        where = f"{label}: " if label else ""
        super().__init__(f"{where}{what} {path} ({reason})")


class FileExists(WriteError):
    """``overwrite=False`` and the file is there already (nothing was written)."""

    def __init__(self, path: Path, label: str | None = None) -> None:
        super().__init__(path, "it already exists", label)


def as_run_failure(err: WriteError) -> GantryError:
    """``err`` for a file a running job writes (checkpoint manifest, metrics, trace): a
    failure of the run (exit 1, retried), not bad input (exit 2, never retried)."""
    return GantryError(str(err))


def _reason(err: BaseException) -> str:
    if isinstance(err, UnicodeEncodeError):
        text = err.object
        around = text[max(0, err.start - 24): err.end + 24]
        return f"not UTF-8 text: {brief(around)} holds bytes that are not UTF-8"
    if isinstance(err, OSError):
        return err.strerror or str(err)
    return str(err)


def temp_name(name: str) -> str:
    """A fresh hidden temp name beside ``name`` (``.<name>.<hex>.tmp``), cut so that it is a
    name the file system takes (at most 255 bytes) however long ``name`` is."""
    tag = f".{os.urandom(4).hex()}{_TEMP_SUFFIX}"
    room = _MAX_NAME_BYTES - 1 - len(tag)
    raw = os.fsencode(name)
    if len(raw) > room:
        name = os.fsdecode(raw[:room])
    return f".{name}{tag}"


def is_temp_name(name: str) -> bool:
    """Whether ``name`` is one of this module's temp names (left by a killed process)."""
    return name.startswith(".") and name.endswith(_TEMP_SUFFIX)


def _fsync_dir(directory: Path) -> None:
    try:
        fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    except OSError:
        return  # not openable (e.g. search-only permission): the rename stands
    try:
        os.fsync(fd)
    except OSError as err:
        if err.errno not in _NO_DIR_SYNC:
            raise
    finally:
        os.close(fd)


def _target(path: Path) -> Path:
    """Where the bytes go: the link's target for a symbolic link, else ``path``."""
    return Path(os.path.realpath(path)) if os.path.islink(path) else path


class _Staged:
    """One file of a FileSet (a plain class: dataclasses cost the CLI's start-up inspect)."""

    __slots__ = ("label", "overwrite", "path", "target", "temp")

    def __init__(self, path: Path, target: Path, temp: Path, label: str | None,
                 overwrite: bool) -> None:
        self.path = path
        """The name the caller gave."""
        self.target = target
        """The file replaced (``path``, or the target of the link at ``path``)."""
        self.temp = temp
        self.label = label
        self.overwrite = overwrite


class FileSet:
    """Files written together: each goes to a temp file beside it; ``commit`` fsyncs them all
    and renames them into place; ``discard`` (or leaving the ``with`` block by an exception)
    removes every temp file and changes nothing. Leaving the block normally commits.

    Rename is the commit point: the data of every file is on disk before the first rename;
    a rename itself failing (the file system broke) can leave the earlier files renamed.
    """

    def __init__(self) -> None:
        self._staged: list[_Staged] = []
        self._done = False

    def __enter__(self) -> FileSet:
        return self

    def __exit__(self, kind: object, value: object, trace: object) -> None:
        if kind is None:
            self.commit()
        else:
            self.discard()

    def _stage(self, path: Path, mode: int | None, label: str | None,
               overwrite: bool) -> tuple[_Staged, int]:
        if self._done:
            raise RuntimeError("FileSet already committed or discarded")
        target = _target(path) if overwrite else path
        temp = target.with_name(temp_name(target.name))
        try:
            keep: int | None = None
            with contextlib.suppress(FileNotFoundError, NotADirectoryError):
                st = os.stat(target)
                if stat.S_ISDIR(st.st_mode):  # refused now, not at the rename after others
                    raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR))
                if stat.S_ISREG(st.st_mode):
                    keep = st.st_mode & 0o7777
            if not overwrite and os.path.lexists(target):
                raise FileExists(path, label)
            fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o666)
        except OSError as err:
            raise WriteError(path, _reason(err), label) from None
        staged = _Staged(path, target, temp, label, overwrite)
        self._staged.append(staged)
        bits = mode if mode is not None else keep
        try:
            if bits is not None:
                os.fchmod(fd, bits)
        except OSError as err:
            os.close(fd)
            raise WriteError(path, _reason(err), label) from None
        return staged, fd

    def write_bytes(self, path: Path, data: bytes, *, mode: int | None = None,
                    label: str | None = None, overwrite: bool = True) -> None:
        """Stage ``data`` as the new content of ``path``."""
        with self.open(path, mode=mode, label=label, overwrite=overwrite) as handle:
            handle.write(data)

    def write_text(self, path: Path, text: str, *, mode: int | None = None,
                   label: str | None = None, overwrite: bool = True) -> None:
        """Stage ``text`` (UTF-8) as the new content of ``path``; text that cannot be UTF-8
        (undecodable bytes carried as surrogates) is refused before anything is created."""
        try:
            data = text.encode("utf-8")
        except UnicodeEncodeError as err:
            raise WriteError(path, _reason(err), label) from None
        self.write_bytes(path, data, mode=mode, label=label, overwrite=overwrite)

    @contextlib.contextmanager
    def open(self, path: Path, *, mode: int | None = None, label: str | None = None,
             overwrite: bool = True) -> Iterator[BinaryIO]:
        """A binary handle on ``path``'s temp file, for content streamed in pieces."""
        staged, fd = self._stage(path, mode, label, overwrite)
        try:
            with os.fdopen(fd, "wb") as handle:
                yield handle
        except (OSError, UnicodeEncodeError) as err:
            if isinstance(err, WriteError):
                raise
            raise WriteError(staged.path, _reason(err), staged.label) from None

    @contextlib.contextmanager
    def temp_path(self, path: Path, *, mode: int | None = None, label: str | None = None,
                  overwrite: bool = True) -> Iterator[Path]:
        """The temp file standing for ``path`` (created, empty), for writers that take a
        file name (matplotlib, shutil.copyfile): an OSError while they fill it is a WriteError
        naming ``path``; it is fsynced and renamed at commit."""
        staged, fd = self._stage(path, mode, label, overwrite)
        os.close(fd)
        try:
            yield staged.temp
        except OSError as err:
            raise WriteError(staged.path, _reason(err), staged.label) from None

    def commit(self) -> None:
        """Fsync every staged file, rename each into place, fsync their directories."""
        if self._done:
            return
        try:
            for staged in self._staged:
                self._sync(staged)
            directories: dict[Path, None] = {}
            for staged in self._staged:
                self._place(staged)
                directories[staged.target.parent] = None
            for directory in directories:
                _fsync_dir(directory)
        except OSError as err:
            raise WriteError(staged.path, _reason(err), staged.label) from None
        finally:
            self.discard()

    @staticmethod
    def _sync(staged: _Staged) -> None:
        fd = os.open(staged.temp, os.O_RDONLY | os.O_CLOEXEC)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    @staticmethod
    def _place(staged: _Staged) -> None:
        if staged.overwrite:
            os.replace(staged.temp, staged.target)
            return
        try:
            os.link(staged.temp, staged.target)  # fails if the file appeared meanwhile
        except FileExistsError:
            raise FileExists(staged.path, staged.label) from None
        except OSError as err:
            if err.errno not in _NO_HARD_LINKS:
                raise
            if os.path.lexists(staged.target):
                raise FileExists(staged.path, staged.label) from None
            os.rename(staged.temp, staged.target)
            return
        os.unlink(staged.temp)

    def discard(self) -> None:
        """Remove every temp file not renamed yet; nothing is put in place."""
        self._done = True
        for staged in self._staged:
            with contextlib.suppress(OSError):
                os.unlink(staged.temp)
        self._staged.clear()


def write_bytes(path: Path, data: bytes, *, mode: int | None = None, label: str | None = None,
                overwrite: bool = True) -> None:
    """Write ``data`` to ``path`` all or nothing."""
    with FileSet() as files:
        files.write_bytes(path, data, mode=mode, label=label, overwrite=overwrite)


def write_text(path: Path, text: str, *, mode: int | None = None, label: str | None = None,
               overwrite: bool = True) -> None:
    """Write ``text`` (UTF-8) to ``path`` all or nothing."""
    with FileSet() as files:
        files.write_text(path, text, mode=mode, label=label, overwrite=overwrite)


@contextlib.contextmanager
def open_atomic(path: Path, *, mode: int | None = None, label: str | None = None,
                overwrite: bool = True) -> Iterator[BinaryIO]:
    """A binary handle whose content becomes ``path`` when the block ends normally; nothing
    changes when it raises."""
    with FileSet() as files, files.open(path, mode=mode, label=label,
                                        overwrite=overwrite) as handle:
        yield handle


@contextlib.contextmanager
def made_directories(path: Path, label: str | None = None) -> Iterator[Path]:
    """``path`` created with its missing parents; when the block raises, the directories
    this made are removed again (each only if empty: files put there by others stay)."""
    missing: list[Path] = []
    probe = path
    try:
        while not probe.is_dir():
            missing.append(probe)
            if probe.parent == probe:
                break
            probe = probe.parent
        for directory in list(reversed(missing)):
            try:
                directory.mkdir()
            except FileExistsError:  # made meanwhile by someone else: not ours to remove
                missing.remove(directory)
    except OSError as err:
        _remove_empty(missing)
        raise WriteError(path, _reason(err), label, "cannot create the directory") from None
    try:
        yield path
    except BaseException:
        _remove_empty(missing)
        raise


def _remove_empty(directories: list[Path]) -> None:
    for directory in directories:  # deepest first
        with contextlib.suppress(OSError):
            directory.rmdir()
