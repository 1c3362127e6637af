"""What an embedded cluster looks like right now: daemons, node states and the switch tree
(or blocks) of its site, as plain data for `gantry cluster status` and its --json form."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from launcher.cluster import client
from launcher.cluster.layout import RunLayout
from launcher.cluster.lifecycle import live_records
from launcher.cluster.render import node_ports
from launcher.cluster.versions import detect_version
from launcher.site_config import LoadedSite, SiteConfig
from topology import hostlists


@dataclass(frozen=True)
class DaemonStatus:
    """One daemon of the cluster."""

    name: str
    """"munged", "slurmctld" or "slurmd-<node>"."""
    running: bool
    """Its recorded process is alive (identity verified)."""
    pid: int | None
    """Process id while running."""
    log: str
    """Its log file."""


@dataclass(frozen=True)
class NodeStatus:
    """One emulated node."""

    name: str
    """Slurm node name."""
    state: str
    """sinfo's state ("idle", "allocated", "drained", "down*"), or "stopped"."""
    port: int
    """Its slurmd port."""
    group: str | None
    """The leaf switch (tree) or block (block) it belongs to."""


@dataclass(frozen=True)
class TopologyGroup:
    """A switch or block, with its child switches and attached nodes."""

    name: str
    """Switch or block name."""
    nodes: list[str] = field(default_factory=list)
    """Nodes attached directly."""
    children: list[TopologyGroup] = field(default_factory=list)
    """Child switches (tree only)."""


@dataclass(frozen=True)
class ClusterStatus:
    """The whole picture."""

    cluster_name: str
    site: str
    run_dir: str
    slurm_conf: str
    topology_conf: str | None
    slurm_version: str
    running: bool
    """Every daemon is alive."""
    daemons: list[DaemonStatus]
    nodes: list[NodeStatus]
    topology_plugin: str
    topology: list[TopologyGroup]
    """Root switches (tree) or blocks (block); empty for flat."""
    gpus_per_node: int = 0
    """Emulated GPUs per node, as the site config gives them to Slurm (nodes.gpus_per_node;
    0: none)."""

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def topology_roots(site: SiteConfig) -> list[TopologyGroup]:
    """The site's switch tree (roots first) or its blocks, from the site config."""
    topo = site.topology
    if topo.plugin == "block":
        return [
            TopologyGroup(b.name, nodes=hostlists.expand(b.nodes, "topology.blocks"))
            for b in topo.blocks
        ]
    if topo.plugin != "tree":
        return []
    by_name = {s.name: s for s in topo.switches}
    children_of = {
        s.name: hostlists.expand(s.switches, "topology.switches") if s.switches else []
        for s in topo.switches
    }
    child_names = {c for kids in children_of.values() for c in kids}

    def build(name: str, seen: frozenset[str]) -> TopologyGroup:
        switch = by_name[name]
        nodes = hostlists.expand(switch.nodes, "topology.switches") if switch.nodes else []
        kids = [build(c, seen | {name}) for c in children_of[name] if c not in seen]
        return TopologyGroup(name, nodes=nodes, children=kids)

    return [build(s.name, frozenset()) for s in topo.switches if s.name not in child_names]


def _group_of_nodes(roots: list[TopologyGroup]) -> dict[str, str]:
    groups: dict[str, str] = {}
    stack = list(roots)
    while stack:
        group = stack.pop()
        for node in group.nodes:
            groups.setdefault(node, group.name)
        stack.extend(group.children)
    return groups


def collect(site: LoadedSite) -> ClusterStatus:
    """Look at the site's run dir and, when the controller runs, ask it for node states."""
    config = site.config
    layout = RunLayout(site.run_dir())
    alive = live_records(layout)
    names = ["munged", "slurmctld", *(f"slurmd-{n}" for n in config.nodes.node_list())]
    daemons = [
        DaemonStatus(
            name=name,
            running=name in alive,
            pid=alive[name].pid if name in alive else None,
            log=str(layout.daemon_log(name)),
        )
        for name in names
    ]
    states: dict[str, str] = {}
    if "slurmctld" in alive and "munged" in alive:
        states = client.node_states(layout)
    roots = topology_roots(config)
    groups = _group_of_nodes(roots)
    nodes = [
        NodeStatus(name=n, state=states.get(n, "stopped"), port=p, group=groups.get(n))
        for n, p in node_ports(config).items()
    ]
    return ClusterStatus(
        cluster_name=config.slurm.cluster_name,
        site=str(site.path),
        run_dir=str(layout.root),
        slurm_conf=str(layout.slurm_conf),
        topology_conf=str(layout.topology_conf) if layout.topology_conf.exists() else None,
        slurm_version=str(detect_version()),
        running=all(d.running for d in daemons),
        daemons=daemons,
        nodes=nodes,
        topology_plugin=config.topology.plugin,
        topology=roots,
        gpus_per_node=config.nodes.gpus_per_node,
    )
