"""The rank program of `gantry demo`: an mpi4py all-reduce across the job's nodes.

Each rank contributes rank + 1; rank 0 prints one JSON line with the sum, the expected
sum n(n+1)/2 and the node each rank ran on; the exit status is 1 when they differ.
Run as `srun --mpi=pmix python -m launcher.cluster.allreduce_check`.
"""

from __future__ import annotations

import json
import os
import sys


def main() -> int:
    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    rank, size = comm.Get_rank(), comm.Get_size()
    total = comm.allreduce(rank + 1, op=MPI.SUM)
    node = os.environ.get("SLURMD_NODENAME", MPI.Get_processor_name())
    nodes = comm.gather(node, root=0)
    expected = size * (size + 1) // 2
    if rank == 0:
        print(json.dumps({"ranks": size, "sum": total, "expected": expected, "nodes": nodes}))
        sys.stdout.flush()
    return 0 if total == expected else 1


if __name__ == "__main__":
    raise SystemExit(main())
