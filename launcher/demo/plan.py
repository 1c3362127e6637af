"""Which nodes the demo job will get: `gantry submit`'s own placement (launcher.job_placement:
the live cluster's free, healthy nodes -> topology placement) of the demo's job file, so the
fault drill can break a planned node."""

from __future__ import annotations

from pathlib import Path

from launcher.errors import GantryError
from launcher.job_placement import JobPlacement, place_job
from launcher.job_request import resolve_request
from launcher.slurm import SlurmClient


def demo_placement(job_path: Path, site_path: Path, client: SlurmClient) -> JobPlacement:
    """The placement `gantry submit job_path --site site_path` computes now; GantryError when
    it plans no nodes (the cluster is busy: the drill needs to know the nodes)."""
    placement = place_job(resolve_request(job_path, site_path), client)
    if placement.mode != "planned":
        raise GantryError(f"the demo needs planned nodes, but {placement.summary}; free the "
                          "embedded cluster (`gantry cluster status`) and run the demo again")
    return placement
