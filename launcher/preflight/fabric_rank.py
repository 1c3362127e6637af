"""The fabric test's rank program: one rank per node, started by the batch script's gate.

Run as ``gantry preflight fabric --site S`` under ``srun --mpi=<plugin>`` (or ``mpirun``)
with one task on each node that passed the node checks. mpi4py gives the ranks, their nodes
and the rendezvous; the data moves over MPI (backend ``mpi``, host memory) or over NCCL
(``nccl``: torch.distributed on GPU 0 of each node; MPI only carries the handshakes).

1. All-reduce (sum) of ``bytes`` float32, one warm-up then ``repeats`` timed runs, each
   between barriers; a run's time is the slowest rank's; the median is recorded.
2. Each ring of :func:`launcher.preflight.fabric_result.ring_orders`, one link at a time:
   the receiver says it is ready (1 byte over MPI), the sender times ``bytes`` there and a
   1-byte answer back (warm-up, then ``repeats``; median). One link at a time, so a link's
   time is that link's alone.
3. Rank 0 prints the record (schema gantry.preflight.fabric) on one line; every rank exits 0.
   A rank that fails (no GPU for NCCL, MPI trouble) prints one ``error:`` line and exits 1;
   past ``timeout_s`` a rank prints its stack to stderr and exits 1 (no record either way).

The test-only hook ``GANTRY_FAULT_SLOW_FABRIC`` (launcher/preflight/fabric_fault.py) slows
one node's transfers.
"""

from __future__ import annotations

import faulthandler
import json
import os
import socket
import statistics
import sys
import time
from typing import Any

from launcher.preflight.fabric_fault import slow_fabric_delay
from launcher.preflight.fabric_result import (
    FabricResult,
    LinkTime,
    Ring,
    ring_orders,
)

MPI_ENV = (("OMPI_MCA_mpi_yield_when_idle", "1"),)
"""Open MPI ranks waiting for their link yield the CPU instead of spinning: where nodes share
cores (the embedded cluster: 8 "nodes" on 2 cores) spinning ranks starve the link being
timed (1 MiB links took 16-48 ms instead of 0.6-10 ms). A site's mpi.env wins."""
NCCL_ENV = (("NCCL_NVLS_ENABLE", "0"), ("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1"),
            ("NVSHMEM_DISABLE_NVLS", "1"))
"""NVLink multicast stays off (as for the gpu.nccl check); a site's nccl.env wins."""


class _MpiWire:
    """Data over MPI, in host memory."""

    def __init__(self, comm: Any, nbytes: int) -> None:
        import numpy as np

        self.comm = comm
        self.data = np.ones(nbytes // 4, dtype=np.float32)
        self.sum = np.empty_like(self.data)
        self.byte = np.zeros(1, dtype=np.uint8)

    def allreduce(self) -> None:
        from mpi4py import MPI

        self.comm.Allreduce(self.data, self.sum, op=MPI.SUM)

    def send(self, peer: int, tag: int, big: bool) -> None:
        self.comm.Send(self.data if big else self.byte, dest=peer, tag=tag)

    def recv(self, peer: int, tag: int, big: bool) -> None:
        self.comm.Recv(self.data if big else self.byte, source=peer, tag=tag)

    def sync(self) -> None:
        """Host memory: nothing is in flight once a call returned."""

    def close(self) -> None:
        """Nothing to tear down."""


class _NcclWire:
    """Data over NCCL (torch.distributed) on GPU 0 of each node."""

    def __init__(self, comm: Any, nbytes: int) -> None:
        import torch
        import torch.distributed as dist

        for key, value in NCCL_ENV:
            os.environ.setdefault(key, value)
        self.torch, self.dist = torch, dist
        rank, size = comm.Get_rank(), comm.Get_size()
        endpoint = None
        if rank == 0:
            with socket.socket() as sock:
                sock.bind(("", 0))
                endpoint = f"{socket.getfqdn()}:{sock.getsockname()[1]}"
        endpoint = comm.bcast(endpoint, root=0)
        torch.cuda.set_device(0)
        dist.init_process_group("nccl", init_method=f"tcp://{endpoint}", rank=rank,
                                world_size=size, device_id=torch.device("cuda", 0))
        self.data = torch.ones(nbytes // 4, dtype=torch.float32, device="cuda")
        self.byte = torch.zeros(1, dtype=torch.uint8, device="cuda")

    def allreduce(self) -> None:
        self.dist.all_reduce(self.data)

    def send(self, peer: int, tag: int, big: bool) -> None:
        self.dist.send(self.data if big else self.byte, dst=peer)

    def recv(self, peer: int, tag: int, big: bool) -> None:
        self.dist.recv(self.data if big else self.byte, src=peer)

    def sync(self) -> None:
        self.torch.cuda.synchronize()

    def close(self) -> None:
        self.dist.destroy_process_group()


def measure(backend: str, nbytes: int, repeats: int) -> FabricResult | None:
    """Run the test on this rank; rank 0 gets the record, the others None."""
    for key, value in MPI_ENV:
        os.environ.setdefault(key, value)
    from mpi4py import MPI  # initialises MPI: after MPI_ENV

    began = time.monotonic()
    comm = MPI.COMM_WORLD
    rank, size = comm.Get_rank(), comm.Get_size()
    node = os.environ.get("SLURMD_NODENAME") or MPI.Get_processor_name()
    nodes: list[str] = comm.allgather(node)
    delay = slow_fabric_delay(node)
    wire: _MpiWire | _NcclWire = (_NcclWire if backend == "nccl" else _MpiWire)(comm, nbytes)
    ready = bytearray(1)

    def allreduce() -> float:
        comm.Barrier()
        start = time.perf_counter()
        time.sleep(delay)
        wire.allreduce()
        wire.sync()
        took: float = comm.allreduce(time.perf_counter() - start, op=MPI.MAX)
        return took

    allreduce()  # warm-up
    allreduce_s = statistics.median(allreduce() for _ in range(repeats))
    mine: dict[tuple[int, int], float] = {}
    tag = 0
    for ring, order in enumerate(ring_orders(size)):
        for i, src in enumerate(order):
            dst = order[(i + 1) % size]
            tag = (tag + 1) % 30000
            if rank == dst:
                for _ in range(repeats + 1):
                    comm.Send(ready, dest=src, tag=tag)
                    wire.recv(src, tag, big=True)
                    wire.sync()
                    time.sleep(delay)
                    wire.send(src, tag, big=False)
                    wire.sync()
            elif rank == src:
                times = []
                for _ in range(repeats + 1):
                    comm.Recv(ready, source=dst, tag=tag)
                    start = time.perf_counter()
                    time.sleep(delay)
                    wire.send(dst, tag, big=True)
                    wire.recv(dst, tag, big=False)
                    wire.sync()
                    times.append(time.perf_counter() - start)
                mine[(ring, i)] = statistics.median(times[1:])
    gathered: list[dict[tuple[int, int], float]] = comm.gather(mine, root=0) or []
    comm.Barrier()
    wire.close()
    if rank != 0:
        return None
    timed = {key: seconds for part in gathered for key, seconds in part.items()}
    rings = []
    for ring, order in enumerate(ring_orders(size)):
        links = [LinkTime(nodes[src], nodes[order[(i + 1) % size]], timed[(ring, i)])
                 for i, src in enumerate(order)]
        rings.append(Ring([nodes[p] for p in order], links))
    return FabricResult(backend, nbytes, repeats, nodes, allreduce_s, rings,
                        time.monotonic() - began)


def run(backend: str, nbytes: int, repeats: int, timeout_s: float) -> int:
    """The rank program: measure, print the record on rank 0, exit 0 (1 past the timeout)."""
    faulthandler.dump_traceback_later(timeout_s, exit=True)
    try:
        result = measure(backend, nbytes, repeats)
    except Exception as err:  # any runtime failure: one line, no record
        node = os.environ.get("SLURMD_NODENAME") or socket.gethostname()
        why = " ".join(f"{type(err).__name__}: {err}".split())
        sys.stderr.write(f"error: fabric test ({backend}) on {node}: {why}\n")
        return 1
    finally:
        faulthandler.cancel_dump_traceback_later()
    if result is not None:
        sys.stdout.write(json.dumps(result.to_dict(), separators=(",", ":")) + "\n")
        sys.stdout.flush()
    return 0
