"""The sbatch/salloc options that obtain a planned allocation, per topology kind and version.

Always ``--nodes=M --nodelist=<exactly the planned nodes>`` (Slurm then allocates exactly
those, or waits), plus what tells Slurm the topology intent: ``--switches=K@T`` on tree sites
(K = planned leaf switches), ``--segment=S`` on block sites when the plan splits the job
(Slurm 24.11+), and ``--exclude`` for the unhealthy nodes so that a resubmission without the
nodelist still avoids them.
"""

from __future__ import annotations

from collections.abc import Iterable

from topology import hostlists
from topology.errors import TopologyError
from topology.model import Topology
from topology.placement.request import BLOCK_PLUGIN_SINCE, SEGMENT_SINCE, PlacementRequest
from topology.placement.select import Selection
from topology.slurm_version import SlurmVersion


def check_version(topology: Topology, version: SlurmVersion) -> None:
    if topology.kind == "block" and version < BLOCK_PLUGIN_SINCE:
        raise TopologyError(
            f"{topology.source}: a block topology needs Slurm {BLOCK_PLUGIN_SINCE.major}."
            f"{BLOCK_PLUGIN_SINCE.minor:02d} or later (topology/block); this site runs {version}"
        )


def slurm_options(
    topology: Topology,
    selection: Selection,
    request: PlacementRequest,
    version: SlurmVersion,
    unhealthy: Iterable[str],
) -> tuple[str, ...]:
    names = [topology.node_names[n] for n in selection.nodes]
    options = [f"--nodes={len(names)}", f"--nodelist={hostlists.collect(names)}"]
    if topology.kind == "tree":
        options.append(f"--switches={len(selection.leaves)}@{request.switch_wait}")
    if selection.segment is not None:
        if version < SEGMENT_SINCE:  # select_block only splits when allowed; keep it honest
            raise TopologyError(f"--segment needs Slurm 24.11 or later; this site runs {version}")
        options.append(f"--segment={selection.segment}")
    bad = sorted(unhealthy)
    if bad:
        options.append(f"--exclude={hostlists.collect(bad)}")
    return tuple(options)
