"""A small PyTorch DDP training script, for gantry's command jobs (examples/ddp/*.yaml).

It reads only PyTorch's distributed environment (``env://``: RANK, WORLD_SIZE, LOCAL_RANK,
MASTER_ADDR, MASTER_PORT), as gantry exports it in both launch modes (``per-rank`` and
``torchrun``) and as ``torchrun --standalone`` does, so the same file runs under all three:

    torchrun --standalone --nproc-per-node 4 examples/ddp/train_ddp.py --steps 20

Backend: NCCL with one GPU per rank (LOCAL_RANK) where CUDA is available, else gloo on CPU.
The model is a 2-layer MLP regressing a fixed random linear map plus noise; every step draws
one global batch from a generator seeded with (seed, step) and rank R trains on its slice
R of it, so the trajectory depends on the seed, the world size and the global batch only,
not on which node a rank runs. Rank 0 prints ``step N loss L`` (the mean of the ranks'
losses, all-reduced) and, with ``--out FILE``, writes one JSON line per step there.
Loss values on CPU/gloo are exactly reproducible for a given world size (one thread per
rank).
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import time
from pathlib import Path

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=20, help="optimizer steps")
    parser.add_argument("--global-batch", type=int, default=64,
                        help="samples per step over all ranks (a multiple of WORLD_SIZE)")
    parser.add_argument("--width", type=int, default=64, help="hidden width of the MLP")
    parser.add_argument("--features", type=int, default=16, help="input features")
    parser.add_argument("--lr", type=float, default=0.02, help="SGD learning rate")
    parser.add_argument("--seed", type=int, default=1234, help="seed of weights and data")
    parser.add_argument("--out", type=Path, default=None,
                        help="rank 0 writes {step, loss} JSON lines here")
    return parser.parse_args()


def global_batch(step: int, args: argparse.Namespace) -> tuple[torch.Tensor, torch.Tensor]:
    """The step's global batch (x: [B, F], y: [B, 1]), the same on every rank."""
    target = torch.Generator().manual_seed(args.seed)
    weights = torch.randn(args.features, 1, generator=target)  # the map to learn
    data = torch.Generator().manual_seed(args.seed * 1_000_003 + step)
    x = torch.randn(args.global_batch, args.features, generator=data)
    y = x @ weights + 0.1 * torch.randn(args.global_batch, 1, generator=data)
    return x, y


def main() -> int:
    args = parse_args()
    torch.set_num_threads(1)
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    if args.global_batch % world:
        raise SystemExit(f"error: --global-batch {args.global_batch} is not a multiple of "
                         f"WORLD_SIZE {world}")
    cuda = torch.cuda.is_available()
    device = torch.device("cuda", local_rank) if cuda else torch.device("cpu")
    if cuda:
        torch.cuda.set_device(device)
    dist.init_process_group("nccl" if cuda else "gloo")
    print(f"rank {rank}/{world} local {local_rank} on {socket.gethostname()} "
          f"node {os.environ.get('SLURMD_NODENAME', '-')} device {device} "
          f"master {os.environ['MASTER_ADDR']}:{os.environ['MASTER_PORT']}", flush=True)

    torch.manual_seed(args.seed)
    model = nn.Sequential(nn.Linear(args.features, args.width), nn.Tanh(),
                          nn.Linear(args.width, 1)).to(device)
    ddp = DistributedDataParallel(model, device_ids=[local_rank] if cuda else None)
    optimizer = torch.optim.SGD(ddp.parameters(), lr=args.lr)
    local = args.global_batch // world
    out = args.out.open("w", encoding="utf-8") if args.out and rank == 0 else None
    start = time.monotonic()
    for step in range(1, args.steps + 1):
        x, y = global_batch(step, args)
        x, y = x[rank * local:(rank + 1) * local].to(device), y[rank * local:(rank + 1) * local]
        loss = nn.functional.mse_loss(ddp(x), y.to(device))
        optimizer.zero_grad(set_to_none=True)
        torch.autograd.backward(loss)  # DDP averages the gradients over the ranks
        optimizer.step()
        mean = loss.detach().clone()
        dist.all_reduce(mean)
        mean /= world
        if rank == 0:
            value = float(mean.item())
            print(f"step {step}/{args.steps} loss {value:.6f}", flush=True)
            if out is not None:
                out.write(json.dumps({"step": step, "loss": value}) + "\n")
                out.flush()
    if out is not None:
        out.close()
    if rank == 0:
        print(f"trained {args.steps} steps on {world} ranks in "
              f"{time.monotonic() - start:.1f} s", flush=True)
    dist.barrier()  # no rank tears gloo down while a peer still talks to it
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    code = main()
    # Skip the interpreter's teardown: gloo's threads can abort it ("terminate called
    # without an active exception") after the run is complete and its output written.
    os._exit(code)
