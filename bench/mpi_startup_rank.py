"""Rank program of bench/mpi_startup_stress.py: MPI start-up, then the first messages.

Modes (argv[1]):
- ``allreduce``  the `gantry demo` rank program's traffic: an all-reduce right after init;
- ``ring``       each rank sends to rank+1 right after init (first traffic is point-to-point);
- ``barrier``    MPI_Barrier right after init, then the all-reduce.
Prints nothing on success; exits 1 when the all-reduce sum is wrong.
"""

from __future__ import annotations

import sys


def main() -> int:
    mode = sys.argv[1] if len(sys.argv) > 1 else "allreduce"
    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    rank, size = comm.Get_rank(), comm.Get_size()
    if mode == "barrier":
        comm.Barrier()
    if mode == "ring":
        got = comm.sendrecv(rank, dest=(rank + 1) % size, source=(rank - 1) % size)
        if got != (rank - 1) % size:
            return 1
    total = comm.allreduce(rank + 1, op=MPI.SUM)
    return 0 if total == size * (size + 1) // 2 else 1


if __name__ == "__main__":
    raise SystemExit(main())
