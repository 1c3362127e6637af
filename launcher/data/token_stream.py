"""`gantry data`'s inputs read as streams, in bounded memory, whatever their size.

Each input is one document, read in pieces of READ_BYTES. Its tokens are appended to a spool
(a hidden temp file beside the shards) as they come; once every input has ended, the spool is
cut into train and val shards (the last --val-fraction of all tokens go to val) by copying
pieces of COPY_TOKENS. Memory stays at a few MiB for a 100 GB corpus or a FIFO that streams
one; disk holds the tokens twice while the spool lives (it is removed at the end, and on any
failure). The byte tokenizer needs no whole document; the GPT-2 tokenizer encodes a document
whole, so a document of more than MAX_GPT2_DOCUMENT_BYTES is refused.

Inputs are regular files or FIFOs (``<(zcat corpus.gz)``): a character or block device
(/dev/zero, a terminal, a disk) or a socket is refused before anything is written.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Callable
from pathlib import Path
from types import TracebackType
from typing import BinaryIO

import numpy as np
import numpy.typing as npt

from launcher.atomic_write import WriteError, temp_name
from launcher.data import byte_tokenizer
from launcher.errors import UserInputError

READ_BYTES = 4 << 20
"""A document is read in pieces of this size."""
COPY_TOKENS = 2 << 20
"""Tokens copied from the spool into a shard at a time (4 MiB)."""
MAX_GPT2_DOCUMENT_BYTES = 64 << 20
"""Largest document --tokenizer gpt2 takes: it encodes a document whole (its token list in
memory is several times the text)."""

Encoder = Callable[[Path, bytes], npt.NDArray[np.uint16]]
"""Encodes one whole document (its bytes; the path names it in errors)."""


def require_stream_input(path: Path) -> None:
    """UserInputError unless ``path`` (an input, links followed) is a regular file or a FIFO:
    a device never ends (/dev/zero) or is not text, a socket cannot be opened."""
    try:
        mode = os.stat(path).st_mode
    except OSError as err:
        raise UserInputError(f"{path}: cannot read ({err.strerror or err})") from None
    if stat.S_ISREG(mode) or stat.S_ISFIFO(mode):
        return
    kind = ("a character device" if stat.S_ISCHR(mode) else
            "a block device" if stat.S_ISBLK(mode) else
            "a socket" if stat.S_ISSOCK(mode) else "not a file")
    raise UserInputError(f"{path}: {kind} (expected a text file, or a FIFO streaming one)")


class TokenSpool:
    """Tokens appended to a hidden temp file in ``directory`` (which must exist), in order;
    the file is removed when the spool is closed. OSErrors are WriteErrors naming ``label``."""

    def __init__(self, directory: Path, label: str) -> None:
        self.label = label
        self.path = directory / temp_name("tokens.spool")
        self.count = 0
        """Tokens appended so far."""
        try:
            self._file: BinaryIO = open(self.path, "xb+")  # noqa: SIM115 (closed by close())
        except OSError as err:
            raise WriteError(self.path, err.strerror or str(err), label) from None

    def __enter__(self) -> TokenSpool:
        return self

    def __exit__(self, kind: type[BaseException] | None, value: BaseException | None,
                 trace: TracebackType | None) -> None:
        self.close()

    def close(self) -> None:
        self._file.close()
        self.path.unlink(missing_ok=True)

    def append(self, tokens: npt.NDArray[np.uint16]) -> None:
        try:
            self._file.write(tokens.astype("<u2").tobytes())
        except OSError as err:  # the disk is full
            raise WriteError(self.path, err.strerror or str(err), self.label) from None
        self.count += len(tokens)

    def copy_to(self, handle: BinaryIO, start: int, count: int) -> None:
        """Tokens ``start`` .. ``start + count`` written to ``handle``, a piece at a time."""
        try:
            self._file.flush()
            self._file.seek(2 * start)
            while count > 0:
                piece = self._file.read(2 * min(count, COPY_TOKENS))
                if not piece:
                    raise OSError(f"the spool ends {count} tokens early")
                handle.write(piece)
                count -= len(piece) // 2
        except OSError as err:
            raise WriteError(self.path, err.strerror or str(err), self.label) from None


def _read_pieces(path: Path, source: BinaryIO, limit: int | None) -> list[bytes]:
    """The rest of ``source`` in pieces; UserInputError past ``limit`` bytes."""
    pieces, size = [], 0
    while piece := source.read(READ_BYTES):
        size += len(piece)
        if limit is not None and size > limit:
            raise UserInputError(f"{path}: a document of more than {limit} bytes is not "
                                 "allowed with --tokenizer gpt2 (it encodes each document "
                                 "whole; split the text into several files)")
        pieces.append(piece)
    return pieces


def spool_document(spool: TokenSpool, path: Path, encode: Encoder | None) -> None:
    """Append the tokens of document ``path`` to ``spool``: with ``encode`` None, the byte
    tokenizer's (its bytes as they are read, then EOT); else ``encode`` of the whole document
    (at most MAX_GPT2_DOCUMENT_BYTES)."""
    try:
        with open(path, "rb") as source:
            if encode is not None:
                data = b"".join(_read_pieces(path, source, MAX_GPT2_DOCUMENT_BYTES))
                spool.append(encode(path, data))
                return
            while piece := source.read(READ_BYTES):
                spool.append(np.frombuffer(piece, dtype=np.uint8).astype(np.uint16))
    except OSError as err:
        raise UserInputError(f"{path}: cannot read: {err.strerror or err}") from None
    spool.append(np.array([byte_tokenizer.EOT_TOKEN], dtype=np.uint16))
