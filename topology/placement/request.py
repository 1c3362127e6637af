"""What a placement is asked for: the job's shape, the cluster's state, the Slurm version.

``PlacementRequest`` is a typed-config dataclass, so a job YAML section or CLI flags build it
with :func:`launcher.typed_config.from_mapping` and get one-line errors naming the field.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from topology.errors import FieldError, TopologyInputError, shown
from topology.model import Topology
from topology.slurm_version import SlurmVersion


@dataclass(frozen=True)
class PlacementRequest:
    """The nodes a pipeline-parallel job needs and how its ranks are laid out on them."""

    nodes: int
    """Nodes that run ranks (N), spares not included."""
    spares: int = 0
    """Extra healthy nodes held in the allocation to replace failing ones (S)."""
    pp: int = 1
    """Pipeline stages per replica."""
    dp: int = 1
    """Data-parallel replicas of the pipeline."""
    gpus_per_node: int = 0
    """GPUs per node = ranks per node; 0 on CPU sites (one rank per node)."""
    switch_wait: str = "10:00"
    """Tree sites: how long Slurm may wait for the leaf-switch count (--switches=K@<this>)."""

    @property
    def total_nodes(self) -> int:
        """N + S: the size of the allocation."""
        return self.nodes + self.spares

    @property
    def ranks_per_node(self) -> int:
        return max(1, self.gpus_per_node)

    @property
    def unit_nodes(self) -> int:
        """Nodes of the smallest whole group of replicas (replicas never split across units).

        pp=8 on 8-GPU nodes: 1 node per replica; pp=16: 2 nodes; pp=2: 1 node holds 4 replicas.
        """
        return math.lcm(self.pp, self.ranks_per_node) // self.ranks_per_node

    def validate(self) -> None:
        for name, value, low in (
            ("nodes", self.nodes, 1),
            ("spares", self.spares, 0),
            ("pp", self.pp, 1),
            ("dp", self.dp, 1),
            ("gpus_per_node", self.gpus_per_node, 0),
        ):
            if value < low:
                raise FieldError(name, f"{value} is not allowed (expected an integer >= {low})")
        ranks, slots = self.pp * self.dp, self.nodes * self.ranks_per_node
        if ranks != slots:
            raise FieldError(
                "dp",
                f"pp({self.pp}) * dp({self.dp}) = {ranks} ranks but nodes({self.nodes}) x "
                f"{self.ranks_per_node} ranks/node = {slots}",
            )
        if not re.fullmatch(r"\d+(:\d{1,2}){0,2}|\d+-\d+(:\d{1,2}){0,2}", self.switch_wait,
                            re.ASCII):
            raise FieldError(
                "switch_wait",
                f"{self.switch_wait!r} is not allowed (expected a Slurm time: minutes, "
                "minutes:seconds, hours:minutes:seconds or days-hours[:minutes[:seconds]])",
            )


@dataclass(frozen=True)
class ClusterState:
    """Which nodes may be used now: free in Slurm and not known bad (preflight history)."""

    free: frozenset[str] | None = None
    """Nodes Slurm reports idle/free; None means every node of the topology."""
    unhealthy: frozenset[str] = field(default_factory=frozenset)
    """Nodes never to use (failed checks, drained by gantry, ...)."""

    @staticmethod
    def of(free: Iterable[str] | None, unhealthy: Iterable[str] = ()) -> ClusterState:
        return ClusterState(
            free=None if free is None else frozenset(free), unhealthy=frozenset(unhealthy)
        )

    def available(self, topology: Topology) -> npt.NDArray[np.bool_]:
        """[N] True for nodes that are free, healthy and on a leaf switch / in a block."""
        ids = topology.node_ids
        for label, names in (("free nodes", self.free or ()), ("unhealthy nodes", self.unhealthy)):
            unknown = sorted(n for n in names if n not in ids)
            if unknown:
                raise TopologyInputError(
                    f"{label}: {', '.join(shown(n) for n in unknown[:5])} "
                    f"{'is' if len(unknown) == 1 else 'are'} "
                    f"not in the topology ({topology.source})"
                )
        if self.free is None:
            mask = np.ones(topology.node_count, dtype=bool)
        else:
            mask = np.zeros(topology.node_count, dtype=bool)
            mask[[ids[n] for n in self.free]] = True
        if self.unhealthy:
            mask[[ids[n] for n in self.unhealthy]] = False
        mask &= topology.node_leaf >= 0
        return mask


BLOCK_PLUGIN_SINCE = SlurmVersion(23, 11)
"""topology/block first shipped in Slurm 23.11."""
SEGMENT_SINCE = SlurmVersion(24, 11)
"""--segment first shipped in Slurm 24.11."""
