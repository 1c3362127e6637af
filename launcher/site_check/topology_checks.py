"""Site checks on the network topology: the topology plugin Slurm runs against the site's
topology.plugin, and Slurm's switches or blocks (`scontrol show topology`) against the site's,
compared by the site's nodes under each (names may differ, groupings may not)."""

from __future__ import annotations

from collections.abc import Sequence

from launcher.errors import UserInputError
from launcher.preflight.result import CheckResult
from launcher.site_check.live_facts import LiveFacts
from launcher.site_config import LoadedSite
from launcher.site_topology import site_topology
from topology import hostlists
from topology.document import TopologyDoc
from topology.model import Topology
from topology.placement.request import BLOCK_PLUGIN_SINCE
from topology.scontrol_format import parse_scontrol_topology
from topology.slurm_version import SlurmVersion

#: Slurm's TopologyPlugin values for each topology.plugin of a site (the first is shown).
PLUGIN_NAMES: dict[str, tuple[str, ...]] = {
    "tree": ("topology/tree",),
    "block": ("topology/block",),
    "flat": ("topology/flat", "topology/none", "topology/default", "(null)", ""),
}
_LISTED = 4
_SOURCE = "scontrol show topology"
_REGENERATE = ("regenerate the site topology from `scontrol show topology`, or fix "
               "topology.conf / the site's topology section")


def _slurm_doc(facts: LiveFacts) -> TopologyDoc | None:
    """Slurm's topology declarations, or None when it printed none or nothing readable."""
    if not facts.topology_text.strip():
        return None
    try:
        return parse_scontrol_topology(facts.topology_text)
    except UserInputError:
        return None


def check_topology_plugin(site: LoadedSite, facts: LiveFacts) -> CheckResult:
    """Slurm places jobs by the kind of topology topology.plugin names (its TopologyPlugin,
    or on Slurm 25.05+ a topology.yaml that `scontrol show topology` reports while
    TopologyPlugin= is unset), and Slurm is new enough for it."""
    wanted = site.config.topology.plugin
    running = facts.config.get("TopologyPlugin", "")
    expected = f"TopologyPlugin={PLUGIN_NAMES[wanted][0]} (topology.plugin: {wanted})"
    if wanted == "block" and facts.version:
        version = SlurmVersion.parse(facts.version, "SLURM_VERSION")
        if version < BLOCK_PLUGIN_SINCE:
            return CheckResult("topology-plugin", "FAIL",
                               f"Slurm {version} has no topology/block", expected,
                               action=f"a block topology needs Slurm {BLOCK_PLUGIN_SINCE.major}."
                               f"{BLOCK_PLUGIN_SINCE.minor:02d} or later")
    shown = f"TopologyPlugin={running or '(unset)'}"
    if running in PLUGIN_NAMES[wanted]:
        return CheckResult("topology-plugin", "PASS", shown, expected)
    doc = _slurm_doc(facts)  # read only for non-flat sites, or a tree/block plugin
    if wanted != "flat" and running in PLUGIN_NAMES["flat"] and doc is not None \
            and doc.kind == wanted:
        return CheckResult("topology-plugin", "PASS", f"{shown}; Slurm reports a {wanted} "
                           "topology (topology.yaml)", expected)
    return CheckResult("topology-plugin", "FAIL", shown, expected,
                       action="Slurm and gantry would place jobs by different topologies: set "
                       "topology.plugin, or TopologyPlugin= in slurm.conf")


def site_groups(topology: Topology) -> dict[frozenset[str], str]:
    """The site's nodes under each switch (tree) or base block -> its name."""
    found: dict[frozenset[str], str] = {}
    for switch in range(topology.switch_count):
        if topology.kind == "block" and not topology.is_leaf(switch):
            continue  # aggregated blocks follow from the base blocks and BlockSizes
        nodes = frozenset(topology.node_names[n] for n in topology.nodes_under(switch))
        if nodes:
            found.setdefault(nodes, topology.switch_names[switch])
    return found


def slurm_groups(doc: TopologyDoc, site_nodes: frozenset[str]) -> dict[frozenset[str], str]:
    """The site's nodes under each of Slurm's switches or base blocks -> its name; switches
    and blocks holding none of them are left out (a site may be part of a cluster)."""
    found: dict[frozenset[str], str] = {}
    if doc.kind == "block":
        for block in doc.blocks:
            nodes = frozenset(hostlists.expand(block.nodes, _SOURCE)) & site_nodes
            if nodes:
                found.setdefault(nodes, block.name)
        return found
    under = _nodes_under_switches(doc)
    for decl in doc.switches:
        nodes = under.get(decl.name, frozenset()) & site_nodes
        if nodes:
            found.setdefault(nodes, decl.name)
    return found


def _nodes_under_switches(doc: TopologyDoc) -> dict[str, frozenset[str]]:
    """Every switch's nodes, through its child switches (leaves first, tier by tier; a
    child that never resolves, as in a cycle, contributes nothing)."""
    under: dict[str, frozenset[str]] = {}
    pending = list(doc.switches)
    while pending:
        waiting = []
        unresolved = {s.name for s in pending}
        for decl in pending:
            children = hostlists.expand(decl.switches, _SOURCE) if decl.switches else []
            if any(c in unresolved and c not in under for c in children):
                waiting.append(decl)
                continue
            nodes = set(hostlists.expand(decl.nodes, _SOURCE)) if decl.nodes and not children \
                else set()
            for child in children:
                nodes |= under.get(child, frozenset())
            under[decl.name] = frozenset(nodes)
        if len(waiting) == len(pending):
            break
        pending = waiting
    return under


def _describe(only: dict[frozenset[str], str], who: str) -> str:
    """"only in Slurm: s0 = n[1-3], ..." for the groups one side has and the other lacks."""
    items = sorted(only.items(), key=lambda item: (len(item[0]), item[1]))
    text = ", ".join(f"{name} = {hostlists.collect(sorted(nodes))}"
                     for nodes, name in items[:_LISTED])
    more = f", and {len(items) - _LISTED} more" if len(items) > _LISTED else ""
    return f"only {who}: {text}{more}"


def check_topology_layout(site: LoadedSite, facts: LiveFacts) -> CheckResult:
    """Slurm's switches/blocks group the site's nodes as the site's topology does (and, for
    blocks, with the same aggregated block sizes where Slurm prints them)."""
    wanted = site.config.topology.plugin
    if wanted == "flat":
        return CheckResult("topology", "SKIP", "flat site: no switches or blocks to compare")
    mine = site_topology(site)
    kind = "switches" if wanted == "tree" else "blocks"
    expected = f"the same {kind} over the site's nodes as {mine.source}"
    if facts.topology_error:
        return CheckResult("topology", "FAIL",
                           f"scontrol show topology failed: {facts.topology_error}", expected,
                           action="check that slurmctld loaded its topology (slurmctld.log)")
    if not facts.topology_text.strip():
        return CheckResult("topology", "SKIP", "Slurm reports no topology to compare", expected)
    try:
        theirs = parse_scontrol_topology(facts.topology_text)
        ours = site_groups(mine)
        slurm = slurm_groups(theirs, frozenset(site.config.nodes.node_list()))
    except UserInputError as err:
        return CheckResult("topology", "FAIL", f"Slurm's topology does not parse: {err}",
                           expected, action="report it with the output of `scontrol show topology`")
    if theirs.kind != mine.kind:
        return CheckResult("topology", "FAIL", f"Slurm reports a {theirs.kind} topology",
                           expected, action=_REGENERATE)
    only_site = {k: v for k, v in ours.items() if k not in slurm}
    only_slurm = {k: v for k, v in slurm.items() if k not in ours}
    if only_site or only_slurm:
        parts = [_describe(d, who) for d, who in ((only_site, "in the site"),
                                                   (only_slurm, "in Slurm")) if d]
        return CheckResult("topology", "FAIL", "; ".join(parts), expected,
                           action=f"placement would count other {kind} than Slurm: {_REGENERATE}")
    sizes = [s for s in theirs.block_sizes if s <= len(site.config.nodes.node_list())]
    if mine.kind == "block" and sizes and sizes != list(mine.block_sizes)[:len(sizes)]:
        return CheckResult("topology", "WARN",
                           f"{len(ours)} blocks as in the site, but Slurm's block sizes are "
                           f"{sizes}, the site's {list(mine.block_sizes)}",
                           expected, action="set topology.block_sizes to Slurm's BlockSizes")
    return CheckResult("topology", "PASS", f"{len(ours)} {kind}, the same node groups in "
                       "Slurm and the site", expected)


def topology_checks(site: LoadedSite, facts: LiveFacts) -> Sequence[CheckResult]:
    """Every topology check, in display order."""
    return [check_topology_plugin(site, facts), check_topology_layout(site, facts)]
