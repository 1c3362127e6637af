"""What the live Slurm of a site says about itself, read once through scontrol: its running
configuration, partitions, nodes (resources, states, reasons) and topology."""

from __future__ import annotations

import re
from dataclasses import dataclass

from launcher.preflight.drain_policy import NodeState
from launcher.preflight.slurm_nodes import parse_show_node
from launcher.site_config import LoadedSite
from launcher.site_slurm import site_client_runner, slurm_conf_problem
from launcher.slurm.runner import CommandRunner, SlurmCommandError, first_line

_CONFIG_LINE = re.compile(r"^([\w\[\]]+)\s+= (.*)$")
_FIELD = re.compile(r"(\w+)=(\S*)")


@dataclass(frozen=True)
class LiveFacts:
    """One reading of the cluster (pure data: every check compares against it)."""

    config: dict[str, str]
    """`scontrol show config`: key -> value as printed ("topology/tree", "300 sec")."""
    partitions: dict[str, dict[str, str]]
    """`scontrol show partition -o`: name -> Key=Value fields."""
    nodes: dict[str, dict[str, str]]
    """`scontrol show node -o`: name -> Key=Value fields (values up to the first blank)."""
    node_states: dict[str, NodeState]
    """name -> state with flags and reason (the reason without Slurm's [user@time])."""
    topology_text: str
    """`scontrol show topology` output ("" when the cluster has no topology plugin)."""
    topology_error: str = ""
    """Why the topology could not be read ("" when it could)."""

    @property
    def version(self) -> str:
        """The controller's Slurm version as it reports it, e.g. "22.05.8"."""
        return self.config.get("SLURM_VERSION", "")


def parse_show_config(text: str) -> dict[str, str]:
    """`scontrol show config` -> key -> value (first occurrence wins; section headers skipped)."""
    config: dict[str, str] = {}
    for line in text.splitlines():
        match = _CONFIG_LINE.match(line.strip())
        if match:
            config.setdefault(match.group(1), match.group(2).strip())
    return config


def parse_one_line_records(text: str, key: str) -> dict[str, dict[str, str]]:
    """`scontrol show <thing> -o` -> the value of ``key`` -> that line's Key=Value fields."""
    records: dict[str, dict[str, str]] = {}
    for line in text.splitlines():
        fields: dict[str, str] = {}
        for name, value in _FIELD.findall(line):
            fields.setdefault(name, value)
        if fields.get(key):
            records[fields[key]] = fields
    return records


def read_live_facts(runner: CommandRunner, *, want_topology: bool) -> LiveFacts:
    """Ask the cluster behind ``runner`` (hidden partitions and FUTURE nodes included: a
    site's may be either); the topology when Slurm runs a topology plugin or
    ``want_topology`` (a topology.yaml of Slurm 25.05+ needs no TopologyPlugin=). Raise
    SlurmCommandError when it does not answer."""
    config = parse_show_config(runner.run(["scontrol", "show", "config"]).stdout)
    partitions = parse_one_line_records(
        runner.run(["scontrol", "--all", "show", "partition", "-o"]).stdout, "PartitionName")
    node_text = runner.run(["scontrol", "--all", "--future", "show", "node", "-o"]).stdout
    topology_text, topology_error = "", ""
    if want_topology or config.get("TopologyPlugin", "") in ("topology/tree", "topology/block"):
        shown = runner.run(["scontrol", "show", "topology"], check=False)
        if shown.returncode == 0:
            topology_text = shown.stdout
        else:
            topology_error = first_line(shown.stderr) or f"exit status {shown.returncode}"
    return LiveFacts(config, partitions, parse_one_line_records(node_text, "NodeName"),
                     parse_show_node(node_text), topology_text, topology_error)


READ_TIMEOUT_S = 60.0
"""Per scontrol call: `show node` on a cluster of thousands of nodes takes seconds."""


def probe_live_facts(site: LoadedSite) -> tuple[LiveFacts | None, str]:
    """The site's live facts, or None and why the cluster could not be asked."""
    problem = slurm_conf_problem(site)
    if problem is not None:
        return None, problem
    runner = site_client_runner(site, quick=True, timeout_s=READ_TIMEOUT_S)
    try:
        return read_live_facts(runner, want_topology=site.config.topology.plugin != "flat"), ""
    except SlurmCommandError as err:
        said = first_line(err.stderr) or str(err).partition(": ")[2] or str(err)
        return None, f"Slurm not reachable (`{' '.join(err.argv)}`: {said})"
