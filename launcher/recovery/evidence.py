"""Which node a failed training step came from, from what the step left behind.

Evidence, strongest first:

0. a node asked to leave the job (launcher/recovery/evictions.py: the health monitor saw a
   FAIL-grade event there, or the straggler finder a slow rank): the ranks checkpointed
   and stopped on it (TRAINER_EVICTED), so it is the culprit (``health-<check>``,
   ``straggler-...``);
1. a launch node Slurm no longer holds for the job or reports DOWN/FAIL: ``node-lost``;
2. the watchdog's ``hang.json`` (launcher/train/watchdog.py): the ranks that stopped proving
   they are alive (``rankR-unresponsive``: killed, stopped, their node gone) or fell behind
   (``rankR-hung``);
3. srun's report (kept by ``gantry step-watch`` in ``step.err``) of a task that died of a
   signal (``srun: error: <node>: task <N>: Killed``): ``rankN-killed`` / ``rankN-<what>``;
4. ranks that started and left neither an exit record nor a fresh beat while the others did
   (``rankR-vanished``): a rank killed leaves no record, and its peers' exits after it (a
   broken connection) say only who noticed;
5. rank exit records with a failure of the rank's own (not 0, not TRAINER_STOPPED, not the
   watchdog's TRAINER_HUNG): the earliest (``rankR-exitC``);
6. srun's report of a task that exited non-zero (other than the watchdog's exit);
7. a launch node whose slurmd Slurm reports not responding (``node-not-responding``: a
   node under load can miss a ping, so this counts only when nothing above names a node).

Nothing found: the fault has no culprit (the step is relaunched on the same nodes, or the
job requeued, without blaming a node).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from launcher.job_dir import HANG_FILE, STEP_ERR_FILE
from launcher.job_exit_codes import TRAINER_EVICTED, TRAINER_HUNG, TRAINER_STOPPED
from launcher.preflight.drain_policy import NodeState
from launcher.recovery.evictions import pending_evictions
from launcher.train.rank_records import RankState, read_ranks

_LOST_FLAGS = ("DOWN", "FAIL", "POWER_DOWN", "POWERED_DOWN")
_SILENT_FLAG = "NOT_RESPONDING"
_EXITED = "Exited with exit code"
_SRUN_TASK = re.compile(r"^srun: error: ([A-Za-z0-9._-]{1,64}): tasks? ([0-9]{1,7})"
                        r"(?:-[0-9]{1,7})?: (.{1,80})$")


@dataclass(frozen=True)
class Finding:
    """The culprits of one failed step."""

    culprits: dict[str, str] = field(default_factory=dict)
    """Node -> what went wrong there (a word for the drain reason ``gantry:run:<what>``)."""
    evidence: str = ""
    """One line: how the culprits were found."""
    fault_time: float | None = None
    """When the step first showed the fault (the earliest failing exit record, the
    watchdog's finding, or the last sign of life of a silent rank); None when unknown."""


def _word(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "-", text.strip().lower()).strip("-")[:48] or "failed"


def _flags(state: NodeState | None) -> set[str]:
    return set(state.state.upper().replace("*", "+NOT_RESPONDING").split("+")) if state \
        else set()


def lost_nodes(launch_nodes: Sequence[str], allocation: Sequence[str] | None,
               states: Mapping[str, NodeState]) -> list[str]:
    """Launch nodes Slurm took from the job or reports down or failed."""
    held = set(allocation) if allocation is not None else None
    return [node for node in launch_nodes
            if (held is not None and node not in held)
            or _flags(states.get(node)) & set(_LOST_FLAGS)]


def silent_nodes(launch_nodes: Sequence[str], states: Mapping[str, NodeState]) -> list[str]:
    """Launch nodes whose slurmd stopped answering (not declared down yet)."""
    return [node for node in launch_nodes if _SILENT_FLAG in _flags(states.get(node))]


def _hang(attempt_dir: Path) -> dict[str, Any] | None:
    try:
        data = json.loads((attempt_dir / HANG_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError, UnicodeDecodeError):
        return None
    return data if isinstance(data, dict) else None


def _srun_failures(attempt_dir: Path) -> list[tuple[str, int, str]]:
    """(node, task, what) of each task failure srun reported, in its order, other than the
    watchdog's exit."""
    try:
        with open(attempt_dir / STEP_ERR_FILE, encoding="utf-8", errors="replace") as handle:
            lines = handle.read(1 << 20).splitlines()
    except OSError:
        return []
    found = []
    for line in lines:
        match = _SRUN_TASK.match(line.strip())
        if match and match.group(3).strip() != f"{_EXITED} {TRAINER_HUNG}":
            found.append((match.group(1), int(match.group(2)), match.group(3)))
    return found


def _srun_finding(node: str, task: int, what: str, at: float | None) -> Finding:
    word = "killed" if what.strip() == "Killed" else _word(what)
    return Finding({node: f"rank{task}-{word}"}, f"srun: {node}: task {task}: {what}", at)


def find_culprits(attempt_dir: Path, launch_nodes: Sequence[str],
                  allocation: Sequence[str] | None, states: Mapping[str, NodeState],
                  now: float) -> Finding:
    """The culprits of the step that ran in ``attempt_dir`` on ``launch_nodes`` (see the
    module docstring for the order of evidence)."""
    mine = set(launch_nodes)
    asked = [e for e in pending_evictions(attempt_dir) if e.node in mine]
    if asked:
        evicted = {e.node: e.what for e in asked}
        return Finding(evicted, "eviction requested: " + "; ".join(
            f"{e.node} by the {e.source} check ({e.reason})" for e in asked),
            min(e.time for e in asked))
    ranks = read_ranks(attempt_dir)
    hang = _hang(attempt_dir)
    at = _fault_time(ranks, hang)
    lost = lost_nodes(launch_nodes, allocation, states)
    if lost:
        return Finding({n: "node-lost" for n in lost},
                       f"Slurm reports {', '.join(lost)} lost (down or gone from the job)", at)
    if hang is not None:
        stalled = [r for r in hang.get("stalled_ranks") or [] if isinstance(r, int)]
        silent = {r for r in hang.get("silent") or [] if isinstance(r, int)}
        culprits: dict[str, str] = {}
        for r in stalled:
            node = ranks[r].node if r in ranks else None
            if node in mine and node not in culprits:
                culprits[node] = f"rank{r}-{'unresponsive' if r in silent else 'hung'}"
        if culprits:
            return Finding(culprits, f"watchdog of rank {hang.get('noticed_by')}: "
                           + ", ".join(f"{v} on {k}" for k, v in culprits.items()), at)
    reports = [r for r in _srun_failures(attempt_dir) if r[0] in mine]
    signalled = [r for r in reports if not r[2].startswith(_EXITED)]
    if signalled:  # a task that died of a signal: who died, not who noticed
        return _srun_finding(*signalled[0], at)
    vanished = _vanished(ranks, now)
    culprits = {}
    for state in vanished:
        if state.node in mine and state.node not in culprits:
            culprits[state.node] = f"rank{state.rank}-vanished"
    if culprits:
        return Finding(culprits, "ranks left no exit record and no recent sign of life: "
                       + ", ".join(f"{v} on {k}" for k, v in culprits.items()), at)
    failed = sorted((s for s in ranks.values() if _own_failure(s)),
                    key=lambda s: (s.exit_time or 0.0, s.rank))
    if failed and failed[0].node in mine:
        first = failed[0]
        node = first.node or ""
        return Finding({node: f"rank{first.rank}-exit{first.exit_code}"},
                       f"rank {first.rank} on {node} exited {first.exit_code} first"
                       + (f" ({first.why[:120]})" if first.why else ""), at)
    if reports:
        return _srun_finding(*reports[0], at)
    quiet = silent_nodes(launch_nodes, states)
    if quiet:
        return Finding({n: "node-not-responding" for n in quiet},
                       f"Slurm reports {', '.join(quiet)} not responding", at)
    return Finding({}, "no node to blame (every rank exited or was stopped alike)", at)


def _fault_time(ranks: Mapping[int, RankState], hang: dict[str, Any] | None) -> float | None:
    """The earliest sign of the fault: a failing exit, the watchdog's finding, or the last
    beat of a rank that then fell silent."""
    times = [s.exit_time for s in ranks.values() if _own_failure(s) or
             s.exit_code == TRAINER_HUNG]
    found = hang.get("time") if hang is not None else None
    if hang is not None and isinstance(found, int | float) and not isinstance(found, bool):
        times.append(float(found))
        for rank in hang.get("silent") or []:
            state = ranks.get(rank) if isinstance(rank, int) else None
            if state is not None and state.beat_time is not None:
                times.append(state.beat_time)
    known = [t for t in times if t is not None]
    return min(known) if known else None


def _own_failure(state: RankState) -> bool:
    return state.exit_code is not None and state.exit_code not in (
        0, TRAINER_STOPPED, TRAINER_HUNG, TRAINER_EVICTED)


def _vanished(ranks: Mapping[int, RankState], now: float) -> list[RankState]:
    """Ranks with no exit record whose beat went quiet earlier than the others' exits."""
    exited = [s.exit_time for s in ranks.values() if s.exit_time is not None]
    if not exited:
        return []
    first_exit = min(exited)
    return [s for s in ranks.values() if s.exit_code is None and s.started is not None
            and (s.beat_time is None or s.beat_time < first_exit - 1.5)]
