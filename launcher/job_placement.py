"""Placement of a job on the live cluster: Slurm's node states -> topology/ placement -> the
script's Placement, placement.json and the rank-order file.

Cluster state comes from the site's Slurm client: *free* nodes are IDLE or MIXED and usable
(not drained, down, not responding, ...); *unhealthy* nodes are those gantry itself drained
(reason starting with ``gantry:``; preflight history will add to this later). When enough nodes
are free, the job is placed on the planned nodes: exactly (``--nodelist`` + ``--switches=K@T``,
per the site's Slurm version) when it is not requeued, else inside the planned domain switch
(everything else ``--exclude``d, ``--switches=K@T``) because Slurm keeps a requeued job's
required nodes and a pinned job whose node died would never run again. When too few nodes
are free, Slurm chooses later within the leaf-switch count an idle cluster would need, never
on an unhealthy node (``--exclude``).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from launcher.errors import GantryError, UserInputError
from launcher.job_request import JobRequest
from launcher.preflight.drain_reason import is_gantry_reason
from launcher.site_config import LoadedSite
from launcher.site_slurm import site_client, site_slurm_env, slurm_conf_problem
from launcher.slurm import NodeInfo, SlurmClient
from launcher.slurm.runner import SlurmCommandError
from launcher.typed_config import from_mapping
from topology import hostlists

if TYPE_CHECKING:  # the planner (numpy) and the renderer (jinja2) load when a job is placed
    from launcher.sbatch_render import Placement as ScriptPlacement
    from topology.model import Topology
    from topology.placement import Placement, PlacementRequest, SlurmVersion

#: Node states that can take a new job now.
FREE_STATES = frozenset({"IDLE", "MIXED"})


@dataclass(frozen=True)
class LiveState:
    """What the cluster looked like when the placement was computed."""

    free: frozenset[str]
    """Site nodes that are idle/mixed and usable."""
    unhealthy: frozenset[str]
    """Site nodes drained by gantry (never planned on; --exclude)."""
    version: SlurmVersion
    """The cluster's Slurm version."""
    source: str
    """Where the state came from, e.g. "slurm 22.05.8 (SLURM_CONF=/x/etc/slurm.conf)"."""
    states: tuple[tuple[str, str], ...] = ()
    """(node, state[+flags]) of every site node, for the record."""

    def to_json(self) -> dict[str, Any]:
        return {"free": sorted(self.free, key=_natural), "unhealthy": sorted(self.unhealthy),
                "slurm_version": str(self.version), "source": self.source,
                "states": dict(self.states)}


def _natural(name: str) -> tuple[str, int]:
    digits = len(name) - len(name.rstrip("0123456789"))
    return (name[: len(name) - digits], int(name[len(name) - digits:] or -1))


def live_state(client: SlurmClient, site: LoadedSite) -> LiveState:
    """Free and unhealthy nodes of ``site`` as its Slurm reports them now.

    Raises SlurmCommandError when Slurm cannot be reached and GantryError when the cluster
    reached has none of the site's nodes (SLURM_CONF points at another cluster).
    """
    from topology.placement import SlurmVersion

    major, minor, micro = client.version()
    nodes = client.node_states()
    return state_from_nodes(nodes, site, SlurmVersion(major, minor, micro),
                            _describe_source(site))


def state_from_nodes(nodes: Sequence[NodeInfo], site: LoadedSite, version: SlurmVersion,
                     source: str) -> LiveState:
    """LiveState from parsed node records (pure: used by live_state and the tests)."""
    known = set(site.config.nodes.node_list())
    mine = [n for n in nodes if n.name in known]
    if not mine:
        seen = hostlists.collect(sorted({n.name for n in nodes})) if nodes else "no nodes"
        raise GantryError(
            f"the Slurm cluster reached ({source}) has {seen}, none of site "
            f"{site.config.name}'s nodes ({site.config.nodes.names}); point SLURM_CONF at the "
            "site's cluster")
    free = {n.name for n in mine if n.state in FREE_STATES and n.usable}
    unhealthy = {n.name for n in mine if n.drained and is_gantry_reason(n.reason)}
    states = tuple((n.name, "+".join((n.state, *n.flags))) for n in
                   sorted(mine, key=lambda n: _natural(n.name)))
    return LiveState(frozenset(free - unhealthy), frozenset(unhealthy), version, source,
                     states)


def _describe_source(site: LoadedSite) -> str:
    env = site_slurm_env(site) or os.environ
    conf = env.get("SLURM_CONF")
    return f"SLURM_CONF={conf}" if conf else "the default Slurm config"


def probe_live_state(site: LoadedSite) -> tuple[LiveState | None, str]:
    """The live state when the site's cluster answers, else None and why not."""
    problem = slurm_conf_problem(site)
    if problem is not None:
        return None, problem
    try:
        return live_state(site_client(site, quick=True), site), ""
    except SlurmCommandError as err:
        return None, f"Slurm not reachable ({err})"


def placement_request(request: JobRequest, switch_wait: str | None = None) -> PlacementRequest:
    """The topology request of a resolved job (ranks per node = the job's tasks per node)."""
    from topology.placement import PlacementRequest

    spec = request.spec
    data: dict[str, Any] = {
        "nodes": spec.resources.nodes, "spares": spec.resources.spares,
        "pp": spec.parallelism.pp, "dp": spec.parallelism.dp,
        "gpus_per_node": request.ranks_per_node,
    }
    if switch_wait is not None:
        data["switch_wait"] = switch_wait
    return from_mapping(PlacementRequest, data, str(request.spec_path))


@dataclass(frozen=True)
class JobPlacement:
    """The placement decided for one job: planned nodes, or Slurm's choice within bounds."""

    mode: str
    """"planned" (pinned to plan.roles), "slurm" (Slurm chooses later) or "none" (no
    topology / no live state: Slurm chooses freely)."""
    summary: str
    """One line for the script header and the CLI."""
    sbatch_options: tuple[str, ...]
    """Options for the #SBATCH header."""
    plan: Placement | None
    """topology/'s placement (mode "planned": of the free nodes; "slurm": of an idle cluster,
    for the switch count), None in mode "none"."""
    state: LiveState | None
    """The cluster state it was computed from."""
    notes: tuple[str, ...] = ()
    """Why the placement is what it is, beyond plan.explanation."""
    pin: str = ""
    """Mode "planned": "exact" (--nodelist: jobs that are not requeued) or "domain" (the
    planned domain switch, the rest excluded: requeueable jobs, see requeue_safe_options)."""

    @property
    def rank_nodes(self) -> tuple[str, ...]:
        """Nodes that run ranks, in rank order (mode "planned" only; else empty)."""
        if self.mode != "planned" or self.plan is None:
            return ()
        return tuple(r.node for r in self.plan.roles if not r.spare)

    @property
    def spare_nodes(self) -> tuple[str, ...]:
        if self.mode != "planned" or self.plan is None:
            return ()
        return tuple(r.node for r in self.plan.roles if r.spare)

    def script_placement(self) -> ScriptPlacement:
        from launcher.sbatch_render import Placement as ScriptPlacement

        return ScriptPlacement(sbatch_options=self.sbatch_options, summary=self.summary,
                               nodes=self.rank_nodes)

    def to_json(self) -> dict[str, Any]:
        """placement.json: the decision, the plan (its roles name the nodes), the state it
        saw (read back by launcher.placement_record)."""
        return {
            "mode": self.mode, "pin": self.pin, "summary": self.summary,
            "sbatch_options": list(self.sbatch_options), "notes": list(self.notes),
            "plan": None if self.plan is None else self.plan.to_json(),
            "cluster_state": None if self.state is None else self.state.to_json(),
        }


def _plan_summary(plan: Placement) -> str:
    nodes = hostlists.collect(plan.node_names)
    spares = [r.node for r in plan.roles if r.spare]
    spare_text = f" (spares {hostlists.collect(spares)})" if spares else ""
    span = f", {len(plan.spanned)} {plan.unit} under {plan.domain}" if plan.unit else ""
    return f"{nodes}{spare_text}{span}"


def decide_placement(request: JobRequest, topology: Topology, state: LiveState | None,
                     note: str = "") -> JobPlacement:
    """Plan ``request`` on ``topology`` given the live ``state`` (None: not reachable)."""
    from topology.placement import ClusterState, plan_placement

    preq = placement_request(request)
    if topology.kind == "flat":
        return JobPlacement("none", "Slurm chooses the nodes (flat topology)", (), None, state)
    if state is None:
        return JobPlacement("none", "Slurm chooses the nodes (cluster state unknown)", (), None,
                            None, (note or "the cluster state was not read",))
    cluster = ClusterState.of(state.free, state.unhealthy)
    try:
        plan = plan_placement(topology, preq, cluster, state.version)
    except GantryError as err:
        if "free" not in str(err):
            raise
        return _slurm_chooses(request, topology, preq, state, str(err))
    if not request.spec.policy.requeue:
        return JobPlacement("planned", _plan_summary(plan), plan.slurm_options, plan, state,
                            pin="exact")
    return JobPlacement("planned", _plan_summary(plan),
                        requeue_safe_options(topology, plan, state.unhealthy), plan, state,
                        (f"requeueable job: pinned to {plan.domain} (--exclude of the rest), "
                         "not to the nodes, so that a requeue after a node loss can run",),
                        pin="domain")


def requeue_safe_options(topology: Topology, plan: Placement,
                         unhealthy: frozenset[str]) -> tuple[str, ...]:
    """The plan's options without --nodelist: Slurm keeps a requeued job's required nodes,
    so a pinned job whose node died would pend forever. Instead every node outside the
    planned domain switch (and every unhealthy node) is excluded and the leaf-switch count
    kept: with the free nodes of submit time, Slurm's tree best fit lands on the plan (checked
    against real allocations in tests/integration/test_placement_vs_slurm.py)."""
    options = [o for o in plan.slurm_options if not o.startswith(("--nodelist=", "--exclude="))]
    outside: set[str] = set()
    if topology.kind == "tree" and plan.domain in topology.switch_ids:
        inside = {topology.node_names[n]
                  for n in topology.nodes_under(topology.switch_ids[plan.domain])}
        outside = {n for n in topology.node_names if n not in inside}
    excluded = sorted(outside | set(unhealthy), key=_natural)
    if excluded:
        options.append(f"--exclude={hostlists.collect(excluded)}")
    return tuple(options)


def _slurm_chooses(request: JobRequest, topology: Topology, preq: PlacementRequest,
                   state: LiveState, why: str) -> JobPlacement:
    """Not enough free nodes now: let Slurm pick when nodes free up, within the leaf-switch
    (block) count an idle cluster needs, away from unhealthy nodes."""
    from topology.placement import ClusterState, plan_placement

    try:
        idle = plan_placement(topology, preq, ClusterState.of(None, state.unhealthy),
                              state.version)
    except GantryError as err:
        raise UserInputError(f"{request.spec_path}: resources: {err}") from None
    options: list[str] = []
    if topology.kind == "tree":
        options.append(f"--switches={len(idle.spanned)}@{preq.switch_wait}")
    if state.unhealthy:
        options.append(f"--exclude={hostlists.collect(sorted(state.unhealthy))}")
    bound = f" within {len(idle.spanned)} {idle.unit}" if idle.unit else ""
    summary = f"Slurm chooses when nodes free up{bound} ({why})"
    return JobPlacement("slurm", summary, tuple(options), idle, state,
                        (f"{why}: the job waits for Slurm instead of pinning busy nodes",))


def place_job(request: JobRequest, client: SlurmClient | None = None) -> JobPlacement:
    """The placement of ``request`` from its site's live cluster (probing it when ``client``
    is None; an unreachable cluster gives mode "none")."""
    from launcher.site_topology import site_topology

    site = request.site
    topology = site_topology(site)
    if topology.kind == "flat":
        return decide_placement(request, topology, None)
    if client is None:
        state, why = probe_live_state(site)
    else:
        state, why = live_state(client, site), ""
    return decide_placement(request, topology, state, why)




def placement_notes(placement: JobPlacement) -> list[str]:
    """Lines for stderr when the job is not placed on planned nodes (flat sites: none)."""
    if placement.mode == "planned":
        return []
    return [f"note: placement: {note}" for note in placement.notes]
