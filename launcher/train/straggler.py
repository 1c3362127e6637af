"""Straggler detection from the per-rank compute timers: pure logic, no I/O.

Every step, each rank's compute time (forward + backward + weight-gradient ops, the native
executor's ``compute_s``) is set against a reference:

- ``peers``: the median compute time of the *other* ranks that run the same stage shape
  (the same layer counts in the same places: first stage with the embedding, last with
  the head, per chunk), when the rank has at least one such peer;
- ``model``: else, the layer split's calibrated cost model (launcher/train/split.py) scales
  the other ranks' times to this rank's stage: reference = cost(this stage) x median over
  the other ranks of compute / cost(their stage); when the rank is the only one there is
  no reference and it is never judged.

A rank is *flagged* once its window (the last ``window`` judged steps) is full, the
median of its per-step ratios (compute / reference) exceeds ``threshold`` and its median
compute time exceeds its median reference by more than ``min_excess_s`` (timer and
scheduling noise: a 60 µs stage measured at 120 µs is twice as slow and costs nothing).
One slow step moves a median of ``window`` steps by nothing. The first ``warmup`` steps a
detector sees (allocations, autotuning, first touches) are not judged. A flagged rank stays
flagged (no second finding) until the median of its window falls below the halfway mark
between 1 and the threshold, or its excess below half of ``min_excess_s`` (hysteresis, so
a rank that hovers at the threshold is one episode, not a flood); then it is *cleared*, and
a later slowdown is a new episode.

Cost per step: one sort of the step's compute times per shape (and one of the per-cost rates
when some shape has a single rank), then O(1) per rank.
"""

from __future__ import annotations

import statistics
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

from launcher.train.split import head_cost, layer_flops

WARMUP_STEPS = 3
"""Steps a detector ignores at the start of every run (each attempt starts a new one)."""


@dataclass(frozen=True)
class ChunkShape:
    """One chunk (stage) a rank runs: what determines its compute time."""

    layers: int
    """Transformer blocks."""
    first: bool
    """Holds the embedding (stage 0)."""
    last: bool
    """Holds the output head and the loss (the last stage)."""


RankShape = tuple[ChunkShape, ...]
"""Every chunk a rank runs, in chunk order (virtual_stages of them)."""
Basis = Literal["peers", "model"]
"""What a rank's reference is: its same-shape peers' median, or the cost model's figure."""
Reference = tuple[float | None, Basis, int, float | None]
"""(reference seconds or None, basis, ranks it came from, the model's figure or None)."""


def rank_shapes(pipe_ranks: Sequence[int], pp: int, virtual_stages: int,
                ranges: Sequence[tuple[int, int]]) -> list[RankShape]:
    """The stage shape of every world rank from its pipeline position (``pipe_ranks[r]``)
    and the layer ranges of all ``pp * virtual_stages`` stages (rank p runs stages
    p, p + pp, ...)."""
    n_stages = pp * virtual_stages
    if len(ranges) != n_stages:
        raise ValueError(f"{len(ranges)} layer ranges for pp({pp}) * v({virtual_stages})")
    return [tuple(ChunkShape(ranges[s][1] - ranges[s][0], s == 0, s == n_stages - 1)
                  for s in range(p, n_stages, pp)) for p in pipe_ranks]


def shape_cost(shape: RankShape, n_embd: int, seq_len: int, vocab_size: int) -> float:
    """The split's cost model of a rank's stage(s), in its units (forward flops per token of
    the blocks, the head weighted; the embedding is free): time is taken as proportional."""
    layer = layer_flops(n_embd, seq_len)
    head = head_cost(n_embd, vocab_size)
    return float(sum(c.layers * layer + (head if c.last else 0.0) for c in shape))


@dataclass(frozen=True)
class StragglerSettings:
    """The job's policy.straggler_* settings, as the detector takes them."""

    threshold: float
    """Flag above this ratio of compute time to reference (1.2: 20 % slower)."""
    window: int
    """Judged steps the ratio's median is taken over."""
    min_excess_s: float = 0.0
    """Seconds a rank's median compute must exceed its median reference by, too."""
    warmup: int = WARMUP_STEPS
    """Steps ignored at the start."""

    @property
    def clear_below(self) -> float:
        """A flagged rank is cleared when its window's median ratio falls below this."""
        return 1.0 + (self.threshold - 1.0) / 2.0


@dataclass(frozen=True)
class Finding:
    """A rank flagged as a straggler, or cleared after it was."""

    kind: Literal["flagged", "cleared"]
    rank: int
    """World rank."""
    step: int
    """The step (1-based) whose timings completed the finding."""
    compute_s: float
    """Median of the rank's compute seconds over the window."""
    reference_s: float
    """Median of its reference over the window (its peers' median, or the model's figure)."""
    ratio: float
    """Median over the window of compute / reference, per step."""
    window: int
    """Steps in the window."""
    basis: Basis
    """What the reference is."""
    peers: int
    """Ranks the reference came from (same-shape peers, or all other ranks for the model)."""
    model_ratio: float | None = None
    """The same ratio against the cost model, where it gives a figure (for the record)."""


def median_without(ordered: Sequence[float], index: int) -> float | None:
    """The median of sorted ``ordered`` without its element at ``index`` (None when nothing
    is left)."""
    n = len(ordered) - 1
    if n <= 0:
        return None

    def kept(k: int) -> float:
        return ordered[k] if k < index else ordered[k + 1]

    half = n // 2
    return kept(half) if n % 2 else (kept(half - 1) + kept(half)) / 2.0


def _leave_one_out(values: Sequence[float], members: Sequence[int]) -> dict[int, float | None]:
    """For each member m: the median of values[j] over the other members j."""
    order = sorted(members, key=lambda m: values[m])
    ordered = [values[m] for m in order]
    return {m: median_without(ordered, i) for i, m in enumerate(order)}


@dataclass
class _Track:
    ratios: deque[float]
    computes: deque[float]
    references: deque[float]
    model_ratios: deque[float]
    basis: Basis = "peers"
    peers: int = 0
    flagged: bool = False


@dataclass
class StragglerDetector:
    """Fed one step at a time (:meth:`observe`); returns the findings that step completed."""

    shapes: Sequence[RankShape]
    """Per world rank."""
    settings: StragglerSettings
    costs: Sequence[float] | None = None
    """Per world rank, the cost model's figure for its stage(s) (None: no model)."""
    seen: int = 0
    """Steps observed so far (warm-up included)."""
    _tracks: list[_Track] = field(default_factory=list)
    _groups: list[list[int]] = field(default_factory=list)

    def __post_init__(self) -> None:
        if self.costs is not None and len(self.costs) != len(self.shapes):
            raise ValueError(f"{len(self.costs)} costs for {len(self.shapes)} ranks")
        window = self.settings.window
        self._tracks = [_Track(deque(maxlen=window), deque(maxlen=window),
                               deque(maxlen=window), deque(maxlen=window))
                        for _ in self.shapes]
        groups: dict[RankShape, list[int]] = {}
        for rank, shape in enumerate(self.shapes):
            groups.setdefault(shape, []).append(rank)
        self._groups = list(groups.values())

    def references(self, compute: Sequence[float]) -> list[Reference]:
        """Per rank, its :data:`Reference` for one step's compute times."""
        n = len(self.shapes)
        out: list[Reference] = [(None, "peers", 0, None)] * n
        model: dict[int, float | None] = {}
        if self.costs is not None and n > 1 and all(c > 0 for c in self.costs):
            costs = self.costs
            rates = [compute[r] / costs[r] for r in range(n)]
            model = {r: None if m is None else m * costs[r]
                     for r, m in _leave_one_out(rates, range(n)).items()}
        for members in self._groups:
            peers = _leave_one_out(compute, members) if len(members) > 1 else {}
            for rank in members:
                if rank in peers:
                    out[rank] = (peers[rank], "peers", len(members) - 1, model.get(rank))
                else:
                    out[rank] = (model.get(rank), "model", n - 1, model.get(rank))
        return out

    def observe(self, step: int, compute: Sequence[float]) -> list[Finding]:
        """Judge one step (1-based ``step``) from every rank's compute seconds."""
        if len(compute) != len(self.shapes):
            raise ValueError(f"{len(compute)} timings for {len(self.shapes)} ranks")
        self.seen += 1
        if self.seen <= self.settings.warmup:
            return []
        findings: list[Finding] = []
        for rank, (reference, basis, peers, model_ref) in enumerate(self.references(compute)):
            if reference is None or reference <= 0.0:
                continue
            track = self._tracks[rank]
            if track.basis != basis or track.peers != peers:  # the reference changed: restart
                for values in (track.ratios, track.computes, track.references,
                               track.model_ratios):
                    values.clear()
                track.basis, track.peers = basis, peers
            track.ratios.append(compute[rank] / reference)
            track.computes.append(compute[rank])
            track.references.append(reference)
            if model_ref is not None and model_ref > 0.0:
                track.model_ratios.append(compute[rank] / model_ref)
            if len(track.ratios) < self.settings.window:
                continue
            ratio = statistics.median(track.ratios)
            if not track.flagged and ratio <= self.settings.threshold:
                continue  # the common case: one median per rank and step
            excess = statistics.median(track.computes) - statistics.median(track.references)
            limit = self.settings.min_excess_s
            if not track.flagged and excess > limit:
                track.flagged = True
                findings.append(self._finding("flagged", rank, step, ratio, track))
            elif track.flagged and (ratio < self.settings.clear_below or excess < limit / 2):
                track.flagged = False
                findings.append(self._finding("cleared", rank, step, ratio, track))
        return findings

    def flagged(self) -> list[int]:
        """Ranks flagged now."""
        return [rank for rank, track in enumerate(self._tracks) if track.flagged]

    def _finding(self, kind: Literal["flagged", "cleared"], rank: int, step: int,
                 ratio: float, track: _Track) -> Finding:
        model_ratio = (statistics.median(track.model_ratios) if track.model_ratios else None)
        return Finding(kind, rank, step, statistics.median(track.computes),
                       statistics.median(track.references), ratio, len(track.ratios),
                       track.basis, track.peers, model_ratio)
