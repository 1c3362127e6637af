"""Rank 0's straggler watch in `gantry train`: the detector (launcher/train/straggler.py) fed
with the per-rank timings rank 0 already gathers every step (no collective of its own), its
findings written to stragglers.jsonl (launcher/train/straggler_log.py) and a warning line on
standard error; under ``policy.straggler_action: swap`` the flagged rank's node is handed to
recovery once per episode, to be replaced like a failed node."""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from launcher.errors import GantryError
from launcher.job_dir import ATTEMPT_DIR_ENV
from launcher.job_spec import JobSpec
from launcher.recovery.evictions import request_eviction
from launcher.train import straggler_log
from launcher.train.straggler import (
    Finding,
    StragglerDetector,
    StragglerSettings,
    rank_shapes,
    shape_cost,
)
from launcher.train.straggler_log import seconds

EVICTION_KIND = "straggler"
"""What an eviction request of the watch says it is for."""


def request_swap(attempt_dir: Path, node: str, reason: str,
                 detail: dict[str, Any] | None = None) -> str:
    """Ask recovery to replace ``node`` (launcher/recovery/evictions.py: the ranks agree on
    it after this step, checkpoint it and exit TRAINER_EVICTED; `gantry recover` drains the
    node ``gantry:run:straggler-slow-compute`` and relaunches on a spare); returns what the
    record says: ``requested``, or why not."""
    try:
        request_eviction(attempt_dir, node, EVICTION_KIND, reason,
                         {"check": "slow-compute", **(detail or {})})
    except (GantryError, OSError) as err:
        return f"not requested ({err})"
    return "requested"  # by this call, or already by another source (the first one stands)


@dataclass
class StragglerWatch:
    """Rank 0's: :meth:`after_step` once per step with every rank's compute seconds."""

    detector: StragglerDetector
    nodes: Sequence[str]
    """Per world rank, its node."""
    action: str
    """warn or swap."""
    log: Path
    """stragglers.jsonl."""
    attempt_dir: Path | None
    """$GANTRY_ATTEMPT_DIR (None outside a gantry job: a swap has no recovery to go to)."""
    attempt: str
    """The attempt's name in the records."""
    swapped: set[str] = field(default_factory=set)
    """Nodes whose eviction was requested in this episode."""

    def after_step(self, step: int, compute: Sequence[float]) -> list[Finding]:
        findings = self.detector.observe(step, compute)
        for finding in findings:
            self._record(finding)
        return findings

    def _record(self, finding: Finding) -> None:
        node = self.nodes[finding.rank]
        settings = self.detector.settings
        swap: str | None = None
        flagged = finding.kind == "flagged"
        if flagged and self.action == "swap":
            if self.attempt_dir is None:
                swap = "not available (not in a gantry job)"
            elif node in self.swapped:
                swap = "requested"
            else:
                reason = (f"rank {finding.rank} compute {seconds(finding.compute_s)} vs "
                          f"{seconds(finding.reference_s)} ({finding.ratio:.2f}x over "
                          f"{finding.window} steps)")
                swap = request_swap(self.attempt_dir, node, reason, {
                    "rank": finding.rank, "step": finding.step, "ratio": finding.ratio,
                    "compute_s": finding.compute_s, "reference_s": finding.reference_s,
                    "window": finding.window, "basis": finding.basis})
                if swap == "requested":
                    self.swapped.add(node)
        elif not flagged and not any(self.nodes[r] == node for r in self.detector.flagged()):
            self.swapped.discard(node)
        record = {
            "event": straggler_log.FLAGGED if flagged else straggler_log.CLEARED,
            "time": time.time(), "attempt": self.attempt, "step": finding.step,
            "rank": finding.rank, "node": node, "compute_s": finding.compute_s,
            "reference_s": finding.reference_s, "ratio": finding.ratio,
            "window": finding.window, "basis": finding.basis, "peers": finding.peers,
            "model_ratio": finding.model_ratio, "threshold": settings.threshold,
            "action": self.action, "swap": swap,
        }
        line = straggler_log.describe(record)
        sys.stderr.write(f"gantry train: {'warning: straggler' if flagged else 'straggler'} "
                         f"{line}\n")
        try:
            straggler_log.append(self.log, record)
        except OSError as err:  # evidence, never a reason for training to fail
            sys.stderr.write(f"gantry train: {self.log}: cannot record the straggler "
                             f"({err.strerror})\n")


def watch_for(spec: JobSpec, pipe_ranks: Sequence[int], ranges: Sequence[tuple[int, int]],
              nodes: Sequence[str], run_dir: Path) -> StragglerWatch | None:
    """Rank 0's watch for this job (None with ``policy.straggler_action: off``)."""
    policy, par, model = spec.policy, spec.parallelism, spec.model
    if policy.straggler_action == "off":
        return None
    shapes = rank_shapes(pipe_ranks, par.pp, par.virtual_stages, ranges)
    costs = [shape_cost(s, model.n_embd, model.seq_len, model.vocab_size) for s in shapes]
    settings = StragglerSettings(policy.straggler_threshold, policy.straggler_window_steps,
                                 policy.straggler_min_excess_s)
    attempt = os.environ.get(ATTEMPT_DIR_ENV)
    return StragglerWatch(StragglerDetector(shapes, settings, costs), list(nodes),
                          policy.straggler_action, straggler_log.log_path(run_dir),
                          Path(attempt) if attempt else None,
                          Path(attempt).name if attempt else run_dir.name)
