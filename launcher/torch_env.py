"""PyTorch's distributed environment for a rank of a ``per-rank`` command job (pure but for exec).

A ``per-rank`` job starts one task per rank (srun, or mpirun) and every task runs
``gantry torch-env --nodes N1,N2,... --ranks-per-node G -- ARGV``, which execs ARGV with
what PyTorch's ``env://`` initialisation reads (``torch.distributed.init_process_group``):

- ``NODE_RANK``: the index of this task's node (``$SLURMD_NODENAME``) in the launch nodes
  as the gate wrote them (allocation order, a spare that replaced a failed node included);
  without a Slurm node name (mpirun started the task outside a Slurm step) the launcher's
  rank // G;
- ``LOCAL_RANK``: the task's rank on its node (Open MPI's ``OMPI_COMM_WORLD_LOCAL_RANK``
  under mpirun, else srun's ``SLURM_LOCALID``); ``LOCAL_WORLD_SIZE``: G;
- ``RANK`` = NODE_RANK * G + LOCAL_RANK, so rank 0 runs on the first launch node, whose
  address the batch script exports as ``MASTER_ADDR`` (with ``MASTER_PORT``, a free port
  found there just before the launch); ``WORLD_SIZE`` = nodes * G.

RANK follows the launch nodes' order by construction, whatever order the launcher numbers
its tasks in; with the gate's allocation order it equals srun's task number, which
``GANTRY_TASK_ID`` keeps (what ``srun --label`` prints).
"""

from __future__ import annotations

import os
import socket
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from launcher.errors import UserInputError

LOCAL_RANK_ENV = ("OMPI_COMM_WORLD_LOCAL_RANK", "SLURM_LOCALID")
"""Where a task finds its rank on its node, in this order: Open MPI's first, because a
process that mpirun started inherits the SLURM_* of the orted that srun started (one per
node: SLURM_LOCALID 0 for all its processes); srun's own tasks have no OMPI_* yet."""
TASK_RANK_ENV = ("OMPI_COMM_WORLD_RANK", "SLURM_PROCID")
"""Where a task finds the launcher's number of it, in this order (as LOCAL_RANK_ENV)."""


@dataclass(frozen=True)
class RankEnv:
    """One rank's place in the job, as PyTorch's env:// initialisation reads it."""

    rank: int
    world_size: int
    local_rank: int
    local_world_size: int
    node_rank: int
    task_id: int

    def variables(self) -> dict[str, str]:
        """The environment variables (names as torchrun sets them)."""
        return {
            "RANK": str(self.rank), "WORLD_SIZE": str(self.world_size),
            "LOCAL_RANK": str(self.local_rank), "LOCAL_WORLD_SIZE": str(self.local_world_size),
            "NODE_RANK": str(self.node_rank), "GROUP_RANK": str(self.node_rank),
            "GANTRY_TASK_ID": str(self.task_id),
        }


def _number(env: Mapping[str, str], keys: Sequence[str], what: str) -> int:
    for key in keys:
        value = env.get(key, "")
        if value.isascii() and value.isdigit():
            return int(value)
    raise UserInputError(f"torch-env: no {what} in the environment (expected one of "
                         f"{', '.join(keys)}: run it as a task of srun or mpirun)")


def rank_env(nodes: Sequence[str], ranks_per_node: int, env: Mapping[str, str]) -> RankEnv:
    """This task's RankEnv from the launcher's environment ``env`` and the launch nodes in
    the gate's order; UserInputError when the environment cannot place it."""
    if not nodes or ranks_per_node < 1:
        raise UserInputError(f"torch-env: {len(nodes)} nodes x {ranks_per_node} ranks per "
                             "node is not allowed (expected at least one of each)")
    local = _number(env, LOCAL_RANK_ENV, "local rank")
    task = _number(env, TASK_RANK_ENV, "task rank")
    if local >= ranks_per_node:
        raise UserInputError(f"torch-env: local rank {local} is not allowed (expected below "
                             f"--ranks-per-node {ranks_per_node})")
    node_name = env.get("SLURMD_NODENAME", "")
    if node_name:
        if node_name not in nodes:
            raise UserInputError(f"torch-env: node {node_name} is not a launch node (expected "
                                 f"one of {','.join(nodes)})")
        node_rank = list(nodes).index(node_name)
    else:
        node_rank = task // ranks_per_node
    if node_rank >= len(nodes):
        raise UserInputError(f"torch-env: task {task} is not allowed (expected below "
                             f"{len(nodes)} nodes x {ranks_per_node} ranks)")
    return RankEnv(rank=node_rank * ranks_per_node + local,
                   world_size=len(nodes) * ranks_per_node, local_rank=local,
                   local_world_size=ranks_per_node, node_rank=node_rank, task_id=task)


def free_port() -> int:
    """A TCP port free on this host now (the kernel's choice for port 0, as torchrun picks
    its workers' MASTER_PORT); the caller binds it again moments later."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("", 0))
        return int(sock.getsockname()[1])


def exec_rank(argv: Sequence[str], nodes: Sequence[str], ranks_per_node: int) -> None:
    """Replace this process by ``argv`` with this rank's PyTorch environment."""
    if not argv:
        raise UserInputError("torch-env: no command after -- (expected the rank's argv)")
    env = dict(os.environ)
    env.update(rank_env(nodes, ranks_per_node, env).variables())
    try:
        os.execvpe(argv[0], list(argv), env)
    except OSError as err:
        raise UserInputError(f"command: {argv[0]!r} cannot be run ({err.strerror})") from None
