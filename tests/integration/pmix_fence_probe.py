"""Rank program of test_mpi_startup.py: is a PMIx fence a barrier across emulated nodes?

Run as `srun --mpi=pmix python pmix_fence_probe.py MARKER_DIR DELAY_S`. Each rank leaves a
marker file and then calls PMIx_Fence without data, the kind of fence that ends Open MPI's
MPI_Init; the last rank waits DELAY_S seconds first. After the fence every rank's marker must
exist: a rank that finds one missing left the fence before that peer entered it, says which
and exits 1. Talks to libpmix through ctypes (mpi4py does not expose PMIx).
"""

from __future__ import annotations

import ctypes
import os
import sys
import time
from pathlib import Path


class PmixProc(ctypes.Structure):
    """pmix_proc_t: namespace (PMIX_MAX_NSLEN + 1 chars) and rank."""

    _fields_ = [("nspace", ctypes.c_char * 256), ("rank", ctypes.c_uint32)]


def main() -> int:
    marker_dir, delay_s = Path(sys.argv[1]), float(sys.argv[2])
    pmix = ctypes.CDLL("libpmix.so.2")
    me = PmixProc()
    rc = pmix.PMIx_Init(ctypes.byref(me), None, ctypes.c_size_t(0))
    if rc != 0:
        print(f"PMIx_Init failed: status {rc}", flush=True)
        return 2
    size = int(os.environ["SLURM_NTASKS"])
    if me.rank == size - 1:
        time.sleep(delay_s)
    (marker_dir / f"entered-{me.rank}").touch()
    rc = pmix.PMIx_Fence(None, ctypes.c_size_t(0), None, ctypes.c_size_t(0))
    missing = [r for r in range(size) if not (marker_dir / f"entered-{r}").exists()]
    pmix.PMIx_Finalize(None, ctypes.c_size_t(0))
    if rc != 0 or missing:
        print(f"rank {me.rank}: PMIx_Fence status {rc}; left the fence before ranks "
              f"{missing} entered it", flush=True)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
