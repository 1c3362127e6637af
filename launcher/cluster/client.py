"""Running Slurm's client commands (scontrol, sinfo, squeue, scancel, sbatch) against an
embedded cluster: SLURM_CONF points at its generated slurm.conf; through the one Slurm
runner (:func:`launcher.slurm.runner.run_slurm`), never through a shell."""

from __future__ import annotations

import os
import shlex
from collections.abc import Mapping, Sequence

from launcher.cluster.layout import RunLayout
from launcher.errors import GantryError
from launcher.process_runner import ToolOutput
from launcher.slurm.cli_backend import CliSlurmClient
from launcher.slurm.records import NodeInfo, sinfo_state
from launcher.slurm.runner import CommandRunner, run_slurm
from launcher.slurm.tools import require_tool


def slurm_env(layout: RunLayout, base: Mapping[str, str] | None = None) -> dict[str, str]:
    """``base`` (default: this process's environment) with SLURM_CONF set to the cluster's."""
    env = dict(os.environ if base is None else base)
    env["SLURM_CONF"] = str(layout.slurm_conf)
    return env


def run(layout: RunLayout, tool: str, args: Sequence[str], timeout: float = 30.0) -> ToolOutput:
    """Run a Slurm client tool; the result is returned whatever its exit status (a hung or
    runaway tool, or one that cannot start, is a GantryError)."""
    argv = [require_tool(tool), *args]
    result = run_slurm(argv, timeout, slurm_env(layout))
    if result.timed_out:
        raise GantryError(f"{tool} {' '.join(args)}: no answer within {timeout:.0f} s")
    if result.start_error is not None:
        raise GantryError(f"cannot run {argv[0]} ({result.start_error})")
    if result.returncode is None:
        raise GantryError(f"{tool} {' '.join(args)}: {result.describe_failure()}")
    return result


def controller_answers(layout: RunLayout) -> bool:
    """True when `scontrol ping` reports the controller UP."""
    result = run(layout, "scontrol", ["ping"], timeout=15)
    return result.returncode == 0 and "is UP" in result.stdout


def node_records(layout: RunLayout) -> dict[str, NodeInfo]:
    """Every node as Slurm's JSON holds it, read by the Slurm client (the one node parser,
    :func:`launcher.slurm.records.parse_nodes`)."""
    client = CliSlurmClient(runner=CommandRunner(env=slurm_env(layout)))
    return {node.name: node for node in client.node_states()}


def node_states(layout: RunLayout) -> dict[str, str]:
    """State of every node in sinfo's words ("idle", "allocated", "down*", ...)."""
    return {name: sinfo_state(node) for name, node in node_records(layout).items()}


def active_job_ids(layout: RunLayout) -> list[str]:
    """Ids of jobs that are pending, running or completing."""
    result = run(layout, "squeue", ["-h", "-o", "%A"])
    if result.returncode != 0:
        return []
    return [line.strip() for line in result.stdout.splitlines() if line.strip()]


def parse_key_values(text: str) -> dict[str, str]:
    """Key=Value tokens of one `scontrol show <thing> -o` line (first occurrence wins)."""
    fields: dict[str, str] = {}
    for token in shlex.split(text.strip(), posix=False):
        key, sep, value = token.partition("=")
        if sep:
            fields.setdefault(key, value)
    return fields


def node_reason(layout: RunLayout, node: str) -> str:
    """The reason of a node (why it is drained/down), "" when none or unknown (Slurm not
    answering included: this names a failure, it must not become one)."""
    try:
        found = node_records(layout).get(node)
    except GantryError:
        return ""
    return found.reason if found is not None and found.reason not in ("(null)", "none") else ""
