"""Reusable, page-locked host copies of the stages' buffers, which checkpoints are written from.

A checkpoint copies each stage's params and AdamW moments to host memory before writing them
(so the next steps may run meanwhile). Copying into fresh pageable arrays runs at ~2 GB/s on
the H200 node (4.3 GB of a 350M stage: ~1.9 s on the saving step); into arrays allocated once
and page-locked through the native library it runs as direct DMA (0.08 s, docs/BENCHMARKS.md,
"Checkpoint cost"). The arrays live as long as the writer (the host memory of one checkpoint,
held between saves); a new save reuses them only after the previous write is complete, which
CheckpointWriter guarantees. Where the driver refuses to pin (a locked-memory limit), the
arrays stay pageable and `unpinned` says why.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from launcher.errors import GantryError
from launcher.native.binding import Buffer, NativeLibrary, pin_host, unpin_host
from launcher.train.native_pipeline import Chunk


class HostStaging:
    """One host array per (stage, buffer), made and pinned at first use; :meth:`close` unpins
    them (call it before the arrays go)."""

    def __init__(self) -> None:
        self._arrays: dict[tuple[int, Buffer], npt.NDArray[np.float32]] = {}
        self._pinned: list[tuple[NativeLibrary, npt.NDArray[np.float32]]] = []
        self.unpinned: str | None = None
        """Why the first array that could not be pinned was not (None while all were)."""
        self.close_error: str | None = None
        """The first unpin that failed in :meth:`close`."""

    def read(self, chunk: Chunk, which: Buffer) -> npt.NDArray[np.float32]:
        """A host copy of ``chunk``'s buffer ``which``, in this stage's staging array."""
        key = (chunk.stage, which)
        array = self._arrays.get(key)
        if array is None:
            array = np.empty(chunk.num_params, dtype=np.float32)
            why = pin_host(chunk.lib, array) if array.nbytes else "empty buffer"
            if why is None:
                self._pinned.append((chunk.lib, array))
            elif self.unpinned is None and array.nbytes:
                self.unpinned = why
            self._arrays[key] = array
        return chunk.read(which, out=array)

    @property
    def pinned_bytes(self) -> int:
        return sum(array.nbytes for _, array in self._pinned)

    def close(self) -> int:
        """Unpins every array pinned so far; returns how many were unpinned. An array whose
        unpin fails is still forgotten (its memory stays valid); the first failure is kept in
        ``close_error`` rather than raised, since this runs on the way out of errors too."""
        pinned, self._pinned = self._pinned, []
        unpinned = 0
        for lib, array in pinned:
            try:
                unpin_host(lib, array)
                unpinned += 1
            except GantryError as err:
                if self.close_error is None:
                    self.close_error = str(err)
        self._arrays.clear()
        return unpinned
