"""Active tests, each in its own process under a watchdog: ``python -m launcher.preflight.active``.

Tests (one JSON object printed on the last stdout line):
- ``gpu_compute``: per GPU, an exact-checksum GEMM (integer-valued fp32 inputs, so the
  product is exact and must equal numpy's int64 product bit for bit), a bf16 8192^3 GEMM
  rate (TFLOP/s) and a 1 GiB device copy bandwidth (read+write bytes, GB/s).
- ``gpu_nccl``: one process per GPU (torch.multiprocessing); 1 GiB all-reduce bus bandwidth
  and GPU0 -> GPUi send bandwidth.
- ``cpu_gemm``: the exact-checksum GEMM in float64 on the CPU, and its GFLOP/s.
- ``mpi_ping``: run under ``mpirun -np 2``; round trips between two local ranks.
torch / mpi4py are imported only inside the test that needs them. A test whose module is not
installed prints ``{"setup_error": {"module", "message", "python"}}`` instead (exit 0): a
missing piece of gantry's install, which the checks report as ERROR, never as a node FAIL.
"""

from __future__ import annotations

import json
import os
import socket
import sys
import time
from typing import Any

import numpy as np

CHECK_N = 1024
"""Size of the exact-checksum GEMM (values in [-2, 2]: every partial sum is exact)."""


def _exact_operands(n: int, seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    a = rng.integers(-2, 3, size=(n, n), dtype=np.int64)
    b = rng.integers(-2, 3, size=(n, n), dtype=np.int64)
    return a, b, a @ b  # int64 product: no BLAS, exact


def cpu_gemm() -> dict[str, Any]:
    a, b, ref = _exact_operands(CHECK_N, 1234)
    af, bf = a.astype(np.float64), b.astype(np.float64)
    start = time.perf_counter()
    reps = 3
    for _ in range(reps):
        c = af @ bf
    elapsed = time.perf_counter() - start
    mismatches = int(np.count_nonzero(c != ref))
    return {
        "mismatches": mismatches,
        "checksum": float(c.sum()),
        "reference": float(ref.sum()),
        "gflops": 2 * CHECK_N**3 * reps / elapsed / 1e9,
    }


def gpu_compute() -> dict[str, Any]:
    import torch

    a, b, ref = _exact_operands(CHECK_N, 1234)
    ref_t = torch.from_numpy(ref.astype(np.float32))
    gpus = []
    for index in range(torch.cuda.device_count()):
        dev = torch.device("cuda", index)
        torch.cuda.set_device(dev)
        ga = torch.from_numpy(a.astype(np.float32)).to(dev)
        gb = torch.from_numpy(b.astype(np.float32)).to(dev)
        gc = (ga @ gb).cpu()
        mismatches = int((gc != ref_t).sum().item())
        # bf16 GEMM rate
        n = 8192
        x = torch.randn(n, n, device=dev, dtype=torch.bfloat16)
        y = torch.randn(n, n, device=dev, dtype=torch.bfloat16)
        for _ in range(3):
            x @ y
        torch.cuda.synchronize(dev)
        iters = 20
        t0 = time.perf_counter()
        for _ in range(iters):
            x @ y
        torch.cuda.synchronize(dev)
        tflops = 2 * n**3 * iters / (time.perf_counter() - t0) / 1e12
        del x, y
        # device copy bandwidth
        nbytes = 1 << 30
        src = torch.empty(nbytes, dtype=torch.uint8, device=dev)
        dst = torch.empty_like(src)
        dst.copy_(src)
        torch.cuda.synchronize(dev)
        reps = 10
        t0 = time.perf_counter()
        for _ in range(reps):
            dst.copy_(src)
        torch.cuda.synchronize(dev)
        membw = 2 * nbytes * reps / (time.perf_counter() - t0) / 1e9
        del src, dst
        torch.cuda.empty_cache()
        gpus.append(
            {
                "index": index,
                "name": torch.cuda.get_device_name(dev),
                "mismatches": mismatches,
                "checksum": float(gc.double().sum().item()),
                "reference": float(ref.sum()),
                "tflops_bf16": tflops,
                "membw_gbps": membw,
            }
        )
    return {"gpus": gpus}


def _nccl_worker(rank: int, world: int, port: int, queue: Any) -> None:
    import torch
    import torch.distributed as dist

    torch.cuda.set_device(rank)
    dist.init_process_group(
        "nccl",
        init_method=f"tcp://127.0.0.1:{port}",
        rank=rank,
        world_size=world,
        device_id=torch.device("cuda", rank),
    )
    nbytes = 1 << 30
    buf = torch.ones(nbytes // 4, dtype=torch.float32, device="cuda")
    for _ in range(2):
        dist.all_reduce(buf)
    torch.cuda.synchronize()
    iters = 5
    t0 = time.perf_counter()
    for _ in range(iters):
        dist.all_reduce(buf)
    torch.cuda.synchronize()
    elapsed = (time.perf_counter() - t0) / iters
    busbw = nbytes * 2 * (world - 1) / world / elapsed / 1e9
    p2p: dict[int, float] = {}
    for peer in range(1, world):
        for timed in (False, True):
            dist.barrier()
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            reps = 5 if timed else 1
            for _ in range(reps):
                if rank == 0:
                    dist.send(buf, dst=peer)
                elif rank == peer:
                    dist.recv(buf, src=0)
            torch.cuda.synchronize()
            if timed and rank == peer:
                p2p[peer] = nbytes * reps / (time.perf_counter() - t0) / 1e9
    dist.barrier()
    queue.put({"rank": rank, "busbw_gbps": busbw, "p2p_gbps": p2p})
    dist.destroy_process_group()


def gpu_nccl() -> dict[str, Any]:
    import torch
    import torch.multiprocessing as mp

    world = torch.cuda.device_count()
    if world < 2:
        return {"skipped": f"{world} GPU(s): no peer to talk to"}
    for key, value in (
        ("NCCL_NVLS_ENABLE", "0"),
        ("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1"),
        ("NVSHMEM_DISABLE_NVLS", "1"),
    ):
        os.environ.setdefault(key, value)
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    mp.start_processes(  # type: ignore[attr-defined,no-untyped-call]
        _nccl_worker, args=(world, port, queue), nprocs=world, join=True, start_method="spawn"
    )
    results = sorted((queue.get() for _ in range(world)), key=lambda r: r["rank"])
    p2p = {}
    for r in results:
        p2p.update(r["p2p_gbps"])
    return {
        "world": world,
        "busbw_gbps": min(r["busbw_gbps"] for r in results),
        "p2p_gbps": {str(k): v for k, v in sorted(p2p.items())},
    }


def mpi_ping() -> dict[str, Any]:
    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    rank, size = comm.Get_rank(), comm.Get_size()
    if size < 2:
        return {"error": f"needs 2 ranks, got {size}"}
    payload = bytearray(8)
    reps = 200
    comm.Barrier()
    t0 = time.perf_counter()
    for i in range(reps):
        if rank == 0:
            comm.Send(payload, dest=1, tag=i)
            comm.Recv(payload, source=1, tag=i)
        elif rank == 1:
            comm.Recv(payload, source=0, tag=i)
            comm.Send(payload, dest=0, tag=i)
    rtt_us = (time.perf_counter() - t0) / reps * 1e6
    if rank != 0:
        sys.exit(0)
    return {"ranks": size, "rtt_us": rtt_us}


TESTS = {
    "gpu_compute": gpu_compute,
    "gpu_nccl": gpu_nccl,
    "cpu_gemm": cpu_gemm,
    "mpi_ping": mpi_ping,
}


def main(argv: list[str]) -> int:
    if len(argv) != 1 or argv[0] not in TESTS:
        sys.stderr.write(f"usage: python -m launcher.preflight.active {{{','.join(TESTS)}}}\n")
        return 2
    try:
        result = TESTS[argv[0]]()
    except ModuleNotFoundError as err:
        result = {"setup_error": {"module": err.name or "?", "message": str(err),
                                  "python": sys.executable}}
    sys.stdout.write(json.dumps(result) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
