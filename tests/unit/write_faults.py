"""Real write failures for tests, without root tricks: RLIMIT_FSIZE makes the kernel refuse
a write past N bytes (EFBIG, "File too large"; SIGXFSZ ignored so the write returns the error
instead of killing the process), as a full disk refuses it with ENOSPC."""

from __future__ import annotations

import contextlib
import resource
import signal
from collections.abc import Callable, Iterator


def limit_file_size(limit: int) -> Callable[[], None]:
    """A ``preexec_fn`` for subprocess: files the child writes cannot grow past ``limit``
    bytes (the ignored SIGXFSZ survives exec)."""

    def apply() -> None:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, resource.RLIM_INFINITY))

    return apply


@contextlib.contextmanager
def file_size_limit(limit: int) -> Iterator[None]:
    """In this process, for the block only: no file can grow past ``limit`` bytes. Keep the
    block to the call under test (pytest's own files are under the limit too)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    previous = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (limit, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
        signal.signal(signal.SIGXFSZ, previous)
