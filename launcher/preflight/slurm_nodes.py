"""The few Slurm calls the gate and health checks make, through ``scontrol`` (GANTRY_SCONTROL).

Node states and reasons from ``scontrol show node -o``; drain/resume through
``scontrol update NodeName=... State=...``; job exclusion and requeue through
``scontrol update JobId=... ExcNodeList=...``, ``requeuehold`` and ``release``. Arguments are
passed as an argv list (no shell), so a reason with spaces or quotes stays one argument.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from launcher.errors import GantryError
from launcher.preflight.drain_policy import NodeState
from launcher.preflight.tools import ToolOutput, run_tool, tool_path
from topology import hostlists

_REASON = re.compile(r"\bReason=(.*?)\s+\[[^\]@]*@[^\]]*\]")
_FIELD = re.compile(r"(\w+)=(\S*)")


def parse_show_node(text: str) -> dict[str, NodeState]:
    """``scontrol show node -o`` (one line per node) -> name -> NodeState."""
    nodes = {}
    for line in text.splitlines():
        fields = dict(_FIELD.findall(line))
        name = fields.get("NodeName")
        if not name:
            continue
        match = _REASON.search(line)
        if match:
            reason: str | None = match.group(1).strip()
        else:
            bare = re.search(r"\bReason=(.*)$", line)
            reason = bare.group(1).strip() if bare else None
        if reason in ("", "(null)", "None"):
            reason = None
        nodes[name] = NodeState(name=name, state=fields.get("State", "UNKNOWN"), reason=reason)
    return nodes


@dataclass
class Scontrol:
    """Runs scontrol with a timeout; every failure becomes a GantryError naming the command."""

    timeout_s: float = 30.0
    """Watchdog per call."""
    env: Mapping[str, str] | None = None
    """Environment (None: inherit)."""

    def _run(self, args: Sequence[str], check: bool = True) -> ToolOutput:
        exe = tool_path("scontrol", self.env)
        if exe is None:
            raise GantryError("scontrol not found on PATH (set GANTRY_SCONTROL)")
        out = run_tool([exe, *args], self.timeout_s, self.env)
        if check and not out.ok:
            raise GantryError(f"scontrol {' '.join(args)}: {out.describe_failure()}")
        return out

    def nodes(self) -> dict[str, NodeState]:
        return parse_show_node(self._run(["show", "node", "-o"]).stdout)

    def drain(self, node: str, reason: str) -> None:
        self._run(["update", f"NodeName={node}", "State=DRAIN", f"Reason={reason}"])

    def resume(self, node: str) -> None:
        self._run(["update", f"NodeName={node}", "State=RESUME"])

    def job_node_lists(self, job_id: str) -> tuple[list[str], list[str]]:
        """(ReqNodeList, ExcNodeList) of a job, expanded; empty when unset."""
        fields = dict(_FIELD.findall(self._run(["show", "job", "-o", job_id]).stdout))
        lists = []
        for key in ("ReqNodeList", "ExcNodeList"):
            value = fields.get(key, "")
            lists.append([] if value in ("", "(null)") else hostlists.expand(value, key))
        return lists[0], lists[1]

    def requeue_excluding(self, job_id: str, exclude: str) -> list[str]:
        """Requeue ``job_id`` so it cannot land on ``exclude`` again; returns the steps taken.

        A running job's ExcNodeList cannot be changed, so: requeuehold (the job leaves the
        nodes and waits, held), set ExcNodeList, release. Runs under SIGTERM protection by
        the caller: requeuing our own job signals this very process.
        """
        steps = []
        if exclude:
            direct = self._run(["update", f"JobId={job_id}", f"ExcNodeList={exclude}"], check=False)
            if direct.ok:
                self._run(["requeue", job_id])
                return [f"ExcNodeList={exclude}", "requeue"]
        self._run(["requeuehold", job_id])
        steps.append("requeuehold")
        if exclude:
            self._run(["update", f"JobId={job_id}", f"ExcNodeList={exclude}"])
            steps.append(f"ExcNodeList={exclude}")
        self._run(["release", job_id])
        steps.append("release")
        return steps
