"""Which nodes the demo job will get: the same topology placement `gantry submit` computes
from the live cluster (free, healthy nodes), so the fault drill can break a planned node."""

from __future__ import annotations

from launcher.site_config import LoadedSite
from launcher.slurm import SlurmClient
from topology.placement import ClusterState, PlacementRequest, SlurmVersion, plan_placement
from topology.site_topology import site_topology

GANTRY_DRAIN_PREFIX = "gantry:"


def planned_roles(site: LoadedSite, client: SlurmClient, nodes: int, spares: int, pp: int,
                  dp: int) -> list[tuple[str, bool]]:
    """(node, is spare) in rank order, then spares, as placement plans them now."""
    infos = [n for n in client.node_states() if n.name in set(site.config.nodes.node_list())]
    free = [n.name for n in infos if n.state in ("IDLE", "MIXED") and n.usable]
    unhealthy = [n.name for n in infos if n.drained and n.reason.startswith(GANTRY_DRAIN_PREFIX)]
    request = PlacementRequest(nodes=nodes, spares=spares, pp=pp, dp=dp, gpus_per_node=1)
    major, minor, micro = client.version()
    placement = plan_placement(site_topology(site), request, ClusterState.of(free, unhealthy),
                               SlurmVersion(major, minor, micro))
    return [(role.node, role.spare) for role in placement.roles]
