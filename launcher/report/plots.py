"""The report's figures, drawn on matplotlib Figures (Agg canvas: no display, no pyplot state):
the loss curve (with tokens/s and restarts) and the pipeline timeline (one step per rank,
plus the per-rank phase breakdown over all traced steps)."""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from pathlib import Path

from matplotlib.figure import Figure
from matplotlib.patches import Patch
from matplotlib.ticker import MaxNLocator

from launcher.report.run_data import StepRecord
from launcher.report.timeline import PHASES, StepTimeline

COLORS = {
    "forward": "#4C72B0",
    "backward": "#DD8452",
    "weight-grad": "#8172B3",
    "send": "#2CA02C",
    "recv": "#17BECF",
    "idle": "#E6E6E6",
}
"""Phase -> bar colour (idle is a light grey)."""
_LETTER = {"forward": "F", "backward": "B", "weight-grad": "W"}


def loss_figure(records: Sequence[StepRecord], title: str, path: Path) -> None:
    """Loss per step (top) and tokens/s (bottom); a dashed line where an attempt begins."""
    fig = Figure(figsize=(9, 5.6), dpi=110, layout="constrained")
    ax_loss, ax_tps = fig.subplots(2, 1, sharex=True, height_ratios=[3, 1.4])
    steps = [r.step for r in records]
    marker = "o" if len(records) <= 60 else None
    ax_loss.plot(steps, [r.loss for r in records], color=COLORS["forward"], marker=marker,
                 markersize=3, linewidth=1.6, label="training loss")
    ax_loss.set_ylabel("loss")
    ax_loss.grid(True, alpha=0.3)
    ax_tps.plot(steps, [r.tokens_per_s for r in records], color=COLORS["backward"],
                marker=marker, markersize=3, linewidth=1.2)
    ax_tps.set_ylabel("tokens/s")
    ax_tps.set_xlabel("step")
    ax_tps.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax_tps.grid(True, alpha=0.3)
    for previous, record in itertools.pairwise(records):
        if record.attempt != previous.attempt:
            for ax in (ax_loss, ax_tps):
                ax.axvline(record.step - 0.5, color="#999999", linestyle="--", linewidth=1)
            ax_loss.annotate(f"restart ({record.attempt})", (record.step - 0.5, 1.0),
                             xycoords=("data", "axes fraction"), fontsize=8,
                             ha="left", va="top", color="#666666")
    if records:
        ax_loss.set_title(title, fontsize=11)
    fig.savefig(path, format="png")


def _rank_label(timeline: StepTimeline, rank: int) -> str:
    stages = ",".join(str(s) for s in timeline.stages.get(rank, ()))
    return f"rank {rank} · stage {stages}"


def timeline_figure(timeline: StepTimeline, totals: Mapping[int, Mapping[str, float]],
                    title: str, path: Path) -> None:
    """Top: one bar row per rank for one step (F/B/W + micro-batch on compute bars). Bottom:
    each rank's share of pipeline time per phase over all traced steps."""
    ranks = list(timeline.ranks)
    rows = len(ranks)
    fig = Figure(figsize=(11, 1.9 + 0.95 * rows), dpi=110, layout="constrained")
    ax_gantt, ax_share = fig.subplots(2, 1, height_ratios=[max(rows, 1) * 1.3, rows + 0.6])
    scale = 1e3  # ms
    min_label = timeline.window_s * 0.022
    for row, rank in enumerate(ranks):
        y = rows - 1 - row
        for span in (s for s in timeline.spans if s.rank == rank):
            width = span.end_s - span.start_s
            ax_gantt.barh(y, width * scale, left=span.start_s * scale, height=0.72,
                          color=COLORS[span.phase], edgecolor="white", linewidth=0.3)
            letter = _LETTER.get(span.phase)
            if letter is not None and width >= min_label:
                ax_gantt.text((span.start_s + width / 2) * scale, y,
                              f"{letter}{span.micro_batch}", ha="center", va="center",
                              fontsize=7, color="white")
    ax_gantt.set_yticks(range(rows), [_rank_label(timeline, r) for r in reversed(ranks)])
    ax_gantt.set_xlim(0, timeline.window_s * scale)
    ax_gantt.set_xlabel(f"ms into step {timeline.step + 1} (pipeline phase; the data-parallel "
                        "all-reduce and optimizer follow)")
    ax_gantt.set_title(title, fontsize=11)
    ax_gantt.legend(handles=[Patch(color=COLORS[p], label=p) for p in PHASES],
                    loc="upper center", bbox_to_anchor=(0.5, -0.32 if rows < 3 else -0.2),
                    ncol=len(PHASES), fontsize=8, frameon=False)
    for row, rank in enumerate(ranks):
        y = rows - 1 - row
        seconds = totals.get(rank, {})
        whole = sum(seconds.values()) or 1.0
        left = 0.0
        for phase in PHASES:
            share = seconds.get(phase, 0.0) / whole
            ax_share.barh(y, share * 100, left=left * 100, height=0.7, color=COLORS[phase])
            if share >= 0.06:
                ax_share.text((left + share / 2) * 100, y, f"{share:.0%}", ha="center",
                              va="center", fontsize=7,
                              color="black" if phase == "idle" else "white")
            left += share
    ax_share.set_yticks(range(rows), [f"rank {r}" for r in reversed(ranks)])
    ax_share.set_xlim(0, 100)
    ax_share.set_xlabel("% of pipeline time, all traced steps")
    fig.savefig(path, format="png")
