"""Site checks on Slurm's view of the nodes: the partition, which nodes Slurm knows, their GPUs,
CPUs and memory against the site config, and their states."""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Callable, Sequence

from launcher.job_placement import GANTRY_DRAIN_PREFIX
from launcher.site_check.live_facts import LiveFacts
from launcher.site_check.results import SiteCheck, Status
from launcher.site_config import LoadedSite
from topology import hostlists

_GRES_GPU = re.compile(r"^gpu(?::[^:(]+)?:(\d+)")
#: Node states (base or flag) in which Slurm starts no new job on a node.
_UNSCHEDULABLE = frozenset({"DOWN", "DRAIN", "DRAINED", "DRAINING", "FAIL", "FAILING",
                            "NOT_RESPONDING", "MAINTENANCE", "REBOOT_REQUESTED", "POWERED_DOWN",
                            "POWERING_DOWN", "FUTURE", "UNKNOWN", "INVAL"})
_LISTED = 4
"""Groups of differing nodes named in one message before "and N more"."""


def gres_gpus(gres: str) -> int:
    """GPUs in a node's Gres= value ("gpu:8", "gpu:h200:4(S:0-1),gpu:a100:4", "(null)")."""
    total = 0
    for entry in gres.split(","):
        match = _GRES_GPU.match(entry.strip())
        if match:
            total += int(match.group(1))
    return total


def _grouped(values: dict[str, str]) -> str:
    """"n[1-4]: 4, n[5-8]: 2" from node -> value (nodes of one value as one hostlist)."""
    by_value: dict[str, list[str]] = defaultdict(list)
    for node, value in values.items():
        by_value[value].append(node)
    parts = [f"{hostlists.collect(nodes)}: {value}" for value, nodes in
             sorted(by_value.items(), key=lambda item: -len(item[1]))]
    more = f", and {len(parts) - _LISTED} more" if len(parts) > _LISTED else ""
    return ", ".join(parts[:_LISTED]) + more


def check_known_nodes(site: LoadedSite, facts: LiveFacts) -> SiteCheck:
    """Every node of nodes.names exists in Slurm."""
    names = site.config.nodes.node_list()
    unknown = [n for n in names if n not in facts.nodes]
    expected = f"every node of nodes.names ({site.config.nodes.names}) defined in Slurm"
    if unknown:
        return SiteCheck("nodes", "fail",
                         f"{hostlists.collect(unknown)} unknown to Slurm "
                         f"({len(unknown)} of {len(names)})", expected,
                         "fix nodes.names, or add the nodes to slurm.conf")
    return SiteCheck("nodes", "ok", f"all {len(names)} nodes defined in Slurm", expected)


def check_partition(site: LoadedSite, facts: LiveFacts) -> SiteCheck:
    """slurm.partition exists, is UP, holds every site node; its other nodes are named."""
    name = site.config.slurm.partition
    expected = f"partition {name!r} (slurm.partition), UP, holding {site.config.nodes.names}"
    part = facts.partitions.get(name)
    if part is None:
        known = ", ".join(sorted(facts.partitions)) or "none"
        return SiteCheck("partition", "fail", f"no partition {name!r} (Slurm has: {known})",
                         expected, "set slurm.partition to one of Slurm's partitions")
    members = set(_partition_nodes(part, facts))
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
        return SiteCheck("partition", "fail", f"partition {name!r}: " + "; ".join(problems),
                         expected, "jobs in this partition cannot run on the planned nodes: "
                         "fix slurm.partition or nodes.names")
    if extra:
        return SiteCheck("partition", "warn",
                         f"partition {name!r} is UP and also holds {hostlists.collect(extra)}, "
                         "which nodes.names does not list", expected,
                         "gantry never plans those nodes; list them in nodes.names (and the "
                         "topology) to use them")
    return SiteCheck("partition", "ok", f"partition {name!r} is UP with the site's "
                     f"{len(site_nodes)} nodes", expected)


def _partition_nodes(part: dict[str, str], facts: LiveFacts) -> list[str]:
    nodes = part.get("Nodes", "")
    if nodes in ("", "(null)"):
        return []
    if nodes == "ALL":
        return list(facts.nodes)
    return hostlists.expand(nodes, f"scontrol show partition: Nodes={nodes}")


def _resource_check(name: str, site: LoadedSite, facts: LiveFacts, wanted: int, field: str,
                    read: Callable[[str], int], expected: str, bad: Status,
                    hint: str, label: str) -> SiteCheck:
    seen = {n: read(facts.nodes[n].get(field, "")) for n in site.config.nodes.node_list()
            if n in facts.nodes}
    differing = {n: str(v) for n, v in seen.items() if v != wanted}
    if not seen:
        return SiteCheck(name, "skip", "no site node is defined in Slurm", expected)
    if differing:
        return SiteCheck(name, bad, f"{label} per node: {_grouped(differing)}", expected, hint)
    return SiteCheck(name, "ok", f"{wanted} {label} on all {len(seen)} nodes", expected)


def _int_or_zero(text: str) -> int:
    return int(text) if text.isdigit() else 0


def check_gpus(site: LoadedSite, facts: LiveFacts) -> SiteCheck:
    """Each node's GPUs in Slurm (Gres=gpu:...) = nodes.gpus_per_node (ranks per node)."""
    wanted = site.config.nodes.gpus_per_node
    return _resource_check(
        "gpus", site, facts, wanted, "Gres", gres_gpus,
        f"{wanted} GPUs per node in Gres= (nodes.gpus_per_node; gantry starts that many ranks "
        "per node)", "fail",
        "set nodes.gpus_per_node, or the nodes' Gres= in slurm.conf / gres.conf",
        "GPUs (Gres=)")


def check_cpus(site: LoadedSite, facts: LiveFacts) -> SiteCheck:
    """Each node's CPUTot = nodes.cpus."""
    wanted = site.config.nodes.cpus
    return _resource_check("cpus", site, facts, wanted, "CPUTot", _int_or_zero,
                           f"{wanted} CPUs per node (nodes.cpus)", "warn",
                           "set nodes.cpus to what Slurm reports (preflight expects it)",
                           "CPUs (CPUTot=)")


def check_memory(site: LoadedSite, facts: LiveFacts) -> SiteCheck:
    """Each node's RealMemory = nodes.real_memory_mb."""
    wanted = site.config.nodes.real_memory_mb
    return _resource_check("memory", site, facts, wanted, "RealMemory", _int_or_zero,
                           f"RealMemory={wanted} MB per node (nodes.real_memory_mb)", "warn",
                           "set nodes.real_memory_mb to Slurm's RealMemory (preflight "
                           "expects at least that much)", "MB (RealMemory=)")


def unschedulable(state: str) -> bool:
    """True when a node state ("IDLE+DRAIN", "DOWN*", "MIXED") takes no new jobs."""
    words = state.upper().rstrip("*~#!%$@^-").replace("+", " ").split()
    return state.endswith("*") or any(w in _UNSCHEDULABLE for w in words)


def check_node_states(site: LoadedSite, facts: LiveFacts) -> SiteCheck:
    """Which site nodes take no new jobs now, and why (gantry's own drains told apart)."""
    names = [n for n in site.config.nodes.node_list() if n in facts.node_states]
    if not names:
        return SiteCheck("node-states", "skip", "no site node is defined in Slurm")
    out = [facts.node_states[n] for n in names if unschedulable(facts.node_states[n].state)]
    expected = "every node schedulable"
    if not out:
        return SiteCheck("node-states", "ok", f"{len(names)} of {len(names)} nodes schedulable",
                         expected)
    ours = [s.name for s in out if (s.reason or "").startswith(GANTRY_DRAIN_PREFIX)]
    others = {s.name: f"{s.state} ({s.reason})" if s.reason else s.state for s in out
              if s.name not in ours}
    parts = []
    if others:
        parts.append(_grouped(others))
    if ours:
        parts.append(f"{hostlists.collect(ours)} drained by gantry's preflight")
    return SiteCheck("node-states", "warn",
                     f"{len(names) - len(out)} of {len(names)} nodes schedulable; "
                     + "; ".join(parts), expected,
                     "gantry plans around these nodes; `gantry preflight` on a node shows "
                     "why it failed, clean passes resume gantry's own drains")


def node_checks(site: LoadedSite, facts: LiveFacts) -> Sequence[SiteCheck]:
    """Every node-level check, in display order."""
    return [check(site, facts) for check in (check_partition, check_known_nodes, check_gpus,
                                             check_cpus, check_memory, check_node_states)]
