"""Site checks on Slurm's view of the nodes: the partition, which nodes Slurm knows, their GPUs,
CPUs and memory against the site config, and their states."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from launcher.errors import UserInputError
from launcher.preflight.drain_policy import NodeState
from launcher.preflight.drain_reason import is_gantry_reason
from launcher.preflight.result import CheckResult, Status
from launcher.site_check.live_facts import LiveFacts
from launcher.site_config import LoadedSite
from launcher.slurm.records import NodeInfo
from topology import hostlists

_SUFFIX = {"K": 1024, "M": 1024**2, "G": 1024**3}
#: State suffixes scontrol and sinfo append to the base state, as the flags they stand for.
_STATE_SUFFIX_FLAGS = {"*": "NOT_RESPONDING", "~": "POWERED_DOWN", "#": "POWERING_UP",
                       "%": "POWERING_DOWN", "$": "MAINTENANCE", "@": "REBOOT_REQUESTED",
                       "^": "REBOOT_ISSUED", "!": "POWER_DOWN", "-": "PLANNED"}
_LISTED = 4
"""Groups of differing nodes named in one message before "and N more"."""


def gres_gpus(gres: str) -> int:
    """GPUs in a node's Gres= value: "gpu:8", "gpu:h200:4(S:0-1),gpu:a100:4", "gpu:no_consume:2",
    "gpu:1K"; "(null)" and other resources count 0."""
    total = 0
    for entry in gres.split(","):
        parts = entry.split("(", 1)[0].strip().split(":")
        if parts[0] != "gpu":
            continue
        count = parts[-1] if len(parts) > 1 else "1"
        scale = _SUFFIX.get(count[-1:].upper(), 1)
        digits = count[:-1] if scale > 1 else count
        if digits.isdigit():
            total += int(digits) * scale
    return total


def node_info(state: NodeState) -> NodeInfo:
    """A node state as scontrol prints it ("IDLE+DRAIN", "DOWN*", "IDLE~") in the planner's
    terms, so this check and placement agree on what takes jobs (NodeInfo.usable)."""
    words = state.state.upper().split("+")
    base, flags = words[0], list(words[1:])
    while base and base[-1] in _STATE_SUFFIX_FLAGS:
        flags.append(_STATE_SUFFIX_FLAGS[base[-1]])
        base = base[:-1]
    return NodeInfo(state.name, base, tuple(flags), state.reason or "")


def _grouped(values: dict[str, str]) -> str:
    """"n[1-4]: 4, n[5-8]: 2" from node -> value (nodes of one value as one hostlist)."""
    by_value: dict[str, list[str]] = defaultdict(list)
    for node, value in values.items():
        by_value[value].append(node)
    parts = [f"{hostlists.collect(nodes)}: {value}" for value, nodes in
             sorted(by_value.items(), key=lambda item: -len(item[1]))]
    more = f", and {len(parts) - _LISTED} more" if len(parts) > _LISTED else ""
    return ", ".join(parts[:_LISTED]) + more


def check_known_nodes(site: LoadedSite, facts: LiveFacts) -> CheckResult:
    """Every node of nodes.names exists in Slurm."""
    names = site.config.nodes.node_list()
    unknown = [n for n in names if n not in facts.nodes]
    expected = f"every node of nodes.names ({site.config.nodes.names}) defined in Slurm"
    if unknown:
        return CheckResult("nodes", "FAIL",
                           f"{hostlists.collect(unknown)} unknown to Slurm "
                           f"({len(unknown)} of {len(names)})", expected,
                           action="fix nodes.names, or add the nodes to slurm.conf (a powered-down "
                           "CLOUD node is listed only where PrivateData allows cloud)")
    return CheckResult("nodes", "PASS", f"all {len(names)} nodes defined in Slurm", expected)


def check_partition(site: LoadedSite, facts: LiveFacts) -> CheckResult:
    """slurm.partition exists, is UP, holds every site node; its other nodes are named."""
    name = site.config.slurm.partition
    expected = f"partition {name!r} (slurm.partition), UP, holding {site.config.nodes.names}"
    part = facts.partitions.get(name)
    if part is None:
        known = ", ".join(sorted(facts.partitions)) or "none"
        return CheckResult("partition", "FAIL", f"no partition {name!r} (Slurm has: {known})",
                           expected, action="set slurm.partition to one of Slurm's partitions")
    try:
        members = set(_partition_nodes(part, facts))
    except UserInputError as err:
        return CheckResult("partition", "FAIL", f"partition {name!r}: {err}", expected)
    site_nodes = site.config.nodes.node_list()
    missing = [n for n in site_nodes if n not in members]
    extra = sorted(members - set(site_nodes))
    state = part.get("State", "UNKNOWN")
    problems: list[str] = []
    if state != "UP":
        problems.append(f"State={state}")
    if missing:
        problems.append(f"{hostlists.collect(missing)} not in it")
    if problems:
        return CheckResult("partition", "FAIL", f"partition {name!r}: " + "; ".join(problems),
                           expected, action="jobs in this partition cannot run on the planned "
                           "nodes: fix slurm.partition or nodes.names")
    if extra:
        return CheckResult("partition", "WARN",
                           f"partition {name!r} is UP and also holds {hostlists.collect(extra)}, "
                           "which nodes.names does not list", expected,
                           action="gantry never plans those nodes; list them in nodes.names "
                           "(and the topology) to use them")
    return CheckResult("partition", "PASS", f"partition {name!r} is UP with the site's "
                       f"{len(site_nodes)} nodes", expected)


def _partition_nodes(part: dict[str, str], facts: LiveFacts) -> list[str]:
    """The nodes of a partition record (Nodes= a hostlist, ALL, or none)."""
    nodes = part.get("Nodes", "")
    if nodes in ("", "(null)"):
        return []
    if nodes == "ALL":
        return list(facts.nodes)
    return hostlists.expand(nodes, f"scontrol show partition: Nodes={nodes}")


@dataclass(frozen=True)
class ResourceSpec:
    """One per-node resource compared between Slurm's node records and the site config."""

    name: str
    """Check name."""
    field: str
    """The node record's field (Gres, CPUTot, RealMemory)."""
    read: Callable[[str], int]
    """The field's value as a number."""
    label: str
    """Unit and source in messages, e.g. "GPUs (Gres=)"."""
    expected: str
    """What the site config implies."""
    bad: Status
    """Status when a node differs."""
    hint: str
    """What to do when one differs."""


def _resource_check(spec: ResourceSpec, wanted: int, site: LoadedSite,
                    facts: LiveFacts) -> CheckResult:
    """Every site node's ``spec.field`` equals ``wanted``; differing nodes grouped by value."""
    seen = {n: spec.read(facts.nodes[n].get(spec.field, "")) for n in
            site.config.nodes.node_list() if n in facts.nodes}
    if not seen:
        return CheckResult(spec.name, "SKIP", "no site node is defined in Slurm", spec.expected)
    differing = {n: str(v) for n, v in seen.items() if v != wanted}
    if differing:
        return CheckResult(spec.name, spec.bad, f"{spec.label} per node: {_grouped(differing)}",
                           spec.expected, action=spec.hint)
    return CheckResult(spec.name, "PASS", f"{wanted} {spec.label} on all {len(seen)} nodes",
                       spec.expected)


def _int_or_zero(text: str) -> int:
    """CPUTot= / RealMemory= as an int (0 when absent or not a number)."""
    return int(text) if text.isdigit() else 0


def check_gpus(site: LoadedSite, facts: LiveFacts) -> CheckResult:
    """Each node's GPUs in Slurm (Gres=gpu:...) = nodes.gpus_per_node (ranks per node)."""
    wanted = site.config.nodes.gpus_per_node
    return _resource_check(ResourceSpec(
        "gpus", "Gres", gres_gpus, "GPUs (Gres=)",
        f"{wanted} GPUs per node in Gres= (nodes.gpus_per_node; gantry starts that many ranks "
        "per node and asks --gpus-per-node)", "FAIL",
        "set nodes.gpus_per_node, or the nodes' Gres= in slurm.conf / gres.conf"),
        wanted, site, facts)


def check_cpus(site: LoadedSite, facts: LiveFacts) -> CheckResult:
    """Each node's CPUTot = nodes.cpus."""
    wanted = site.config.nodes.cpus
    return _resource_check(ResourceSpec(
        "cpus", "CPUTot", _int_or_zero, "CPUs (CPUTot=)", f"{wanted} CPUs per node (nodes.cpus)",
        "WARN", "set nodes.cpus to what Slurm reports (preflight expects it)"),
        wanted, site, facts)


def check_memory(site: LoadedSite, facts: LiveFacts) -> CheckResult:
    """Each node's RealMemory = nodes.real_memory_mb."""
    wanted = site.config.nodes.real_memory_mb
    return _resource_check(ResourceSpec(
        "memory", "RealMemory", _int_or_zero, "MB (RealMemory=)",
        f"RealMemory={wanted} MB per node (nodes.real_memory_mb)", "WARN",
        "set nodes.real_memory_mb to Slurm's RealMemory (preflight expects at least that "
        "much)"), wanted, site, facts)


def check_node_states(site: LoadedSite, facts: LiveFacts) -> CheckResult:
    """Which site nodes take no new jobs now, and why (gantry's own drains told apart)."""
    names = [n for n in site.config.nodes.node_list() if n in facts.node_states]
    if not names:
        return CheckResult("node-states", "SKIP", "no site node is defined in Slurm")
    out = [facts.node_states[n] for n in names if not node_info(facts.node_states[n]).usable]
    expected = "every node schedulable"
    if not out:
        return CheckResult("node-states", "PASS", f"{len(names)} of {len(names)} nodes schedulable",
                           expected)
    ours = [s.name for s in out if is_gantry_reason(s.reason)]
    others = {s.name: f"{s.state} ({s.reason})" if s.reason else s.state for s in out
              if s.name not in ours}
    parts = []
    if others:
        parts.append(_grouped(others))
    if ours:
        parts.append(f"{hostlists.collect(ours)} drained by gantry's preflight")
    return CheckResult("node-states", "WARN",
                       f"{len(names) - len(out)} of {len(names)} nodes schedulable; "
                       + "; ".join(parts), expected,
                       action="gantry plans around these nodes; `gantry preflight` on a node shows "
                       "why it failed, clean passes resume gantry's own drains")


def node_checks(site: LoadedSite, facts: LiveFacts) -> Sequence[CheckResult]:
    """Every node-level check, in display order."""
    return [check(site, facts) for check in (check_partition, check_known_nodes, check_gpus,
                                             check_cpus, check_memory, check_node_states)]
