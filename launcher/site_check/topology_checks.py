"""Site checks on the network topology: the topology plugin Slurm runs against the site's
topology.plugin, and Slurm's switches or blocks (`scontrol show topology`) against the site's,
compared by the node sets under each (names may differ, groupings may not)."""

from __future__ import annotations

from collections.abc import Sequence

from launcher.errors import UserInputError
from launcher.site_check.live_facts import LiveFacts
from launcher.site_check.results import SiteCheck
from launcher.site_config import LoadedSite
from topology import hostlists
from topology.build import build_topology
from topology.model import Topology
from topology.placement.request import BLOCK_PLUGIN_SINCE, SlurmVersion
from topology.scontrol_format import parse_scontrol_topology
from topology.site_topology import site_topology

#: Slurm's TopologyPlugin values for each topology.plugin of a site.
PLUGIN_NAMES: dict[str, frozenset[str]] = {
    "tree": frozenset({"topology/tree"}),
    "block": frozenset({"topology/block"}),
    "flat": frozenset({"topology/flat", "topology/none", "topology/default", "(null)", ""}),
}
_LISTED = 4


def check_topology_plugin(site: LoadedSite, facts: LiveFacts) -> SiteCheck:
    """Slurm's TopologyPlugin is the one topology.plugin names (and Slurm is new enough)."""
    wanted = site.config.topology.plugin
    running = facts.config.get("TopologyPlugin", "")
    expected = f"TopologyPlugin={sorted(PLUGIN_NAMES[wanted])[0]} (topology.plugin: {wanted})"
    if wanted == "block" and facts.version:
        version = SlurmVersion.parse(facts.version, "SLURM_VERSION")
        if version < BLOCK_PLUGIN_SINCE:
            return SiteCheck("topology-plugin", "fail",
                             f"Slurm {version} has no topology/block", expected,
                             f"a block topology needs Slurm {BLOCK_PLUGIN_SINCE.major}."
                             f"{BLOCK_PLUGIN_SINCE.minor:02d} or later")
    if running not in PLUGIN_NAMES[wanted]:
        return SiteCheck("topology-plugin", "fail", f"TopologyPlugin={running or '(unset)'}",
                         expected, "Slurm and gantry would place jobs by different topologies: "
                         "set topology.plugin, or TopologyPlugin= in slurm.conf")
    return SiteCheck("topology-plugin", "ok", f"TopologyPlugin={running or '(unset)'}",
                     expected)


def groups(topology: Topology) -> dict[frozenset[str], str]:
    """The node set under each switch (tree) or base block -> its name (nodes of the site)."""
    found: dict[frozenset[str], str] = {}
    for switch in range(topology.switch_count):
        if topology.kind == "block" and not topology.is_leaf(switch):
            continue  # aggregated blocks follow from the base blocks and BlockSizes
        nodes = frozenset(topology.node_names[n] for n in topology.nodes_under(switch))
        if nodes:
            found.setdefault(nodes, topology.switch_names[switch])
    return found


def _describe(only: dict[frozenset[str], str], who: str) -> str:
    items = sorted(only.items(), key=lambda item: (len(item[0]), item[1]))
    text = ", ".join(f"{name} = {hostlists.collect(sorted(nodes))}"
                     for nodes, name in items[:_LISTED])
    more = f", and {len(items) - _LISTED} more" if len(items) > _LISTED else ""
    return f"only {who}: {text}{more}"


def check_topology_layout(site: LoadedSite, facts: LiveFacts) -> SiteCheck:
    """Slurm's switches/blocks group the site's nodes as the site's topology does."""
    wanted = site.config.topology.plugin
    if wanted == "flat":
        return SiteCheck("topology", "skip", "flat site: no switches or blocks to compare")
    if facts.topology_error:
        return SiteCheck("topology", "fail",
                         f"scontrol show topology failed: {facts.topology_error}")
    if not facts.topology_text.strip():
        return SiteCheck("topology", "skip", "Slurm reports no topology to compare")
    mine = site_topology(site)
    nodes = site.config.nodes.node_list()
    try:
        theirs = build_topology(parse_scontrol_topology(facts.topology_text), nodes)
    except UserInputError as err:
        return SiteCheck("topology", "fail", f"Slurm's topology does not parse: {err}")
    kind = "switches" if wanted == "tree" else "blocks"
    expected = f"the same {kind} over the site's nodes as {mine.source}"
    if theirs.kind != mine.kind:
        return SiteCheck("topology", "fail", f"Slurm reports a {theirs.kind} topology",
                         expected)
    site_groups, slurm_groups = groups(mine), groups(theirs)
    only_site = {k: v for k, v in site_groups.items() if k not in slurm_groups}
    only_slurm = {k: v for k, v in slurm_groups.items() if k not in site_groups}
    if only_site or only_slurm:
        parts = [_describe(d, who) for d, who in ((only_site, "in the site"),
                                                   (only_slurm, "in Slurm")) if d]
        return SiteCheck("topology", "fail", "; ".join(parts), expected,
                         "placement would count other " + kind + " than Slurm: regenerate the "
                         "site topology from `scontrol show topology`, or fix topology.conf")
    return SiteCheck("topology", "ok", f"{len(site_groups)} {kind}, the same node groups in "
                     "Slurm and the site", expected)


def topology_checks(site: LoadedSite, facts: LiveFacts) -> Sequence[SiteCheck]:
    """Every topology check, in display order."""
    return [check_topology_plugin(site, facts), check_topology_layout(site, facts)]
