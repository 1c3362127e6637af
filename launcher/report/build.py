"""Builds a report directory: loss.png, timeline.png, report.html (with one line per recovery
of a failed step and per straggler found, the goodput breakdown, MFU and the suggested
checkpoint interval) and a copy of trace.json.

All files are written under temporary names and renamed into place together
(launcher/atomic_write.FileSet), so a failed report leaves no half-written file behind: an
older complete report stays as it was, a report directory this run made is removed again.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from launcher.atomic_write import FileSet, is_temp_name, made_directories
from launcher.errors import GantryError, UserInputError
from launcher.job_dir import METRICS_FILE, TRACE_FILE
from launcher.job_spec import load_job
from launcher.recovery.node_faults import describe_recovery, read_recoveries
from launcher.report import html, plots
from launcher.report.checkpoints import CheckpointRecord, read_checkpoints
from launcher.report.checkpoints import describe as describe_checkpoints
from launcher.report.efficiency import JobEfficiency, job_efficiency
from launcher.report.goodput import PARTS, Goodput, job_goodput
from launcher.report.run_data import (
    StepRecord,
    TraceEvent,
    merge_attempts,
    read_metrics,
    read_trace,
)
from launcher.report.sources import RunSources
from launcher.report.theory import (
    ScheduleError,
    TheoreticalBubble,
    measured_op_costs,
    theoretical_bubble,
)
from launcher.report.timeline import (
    measured_bubble,
    step_bubble,
    step_timeline,
    steps_in,
    totals_by_rank,
    typical_step,
)
from launcher.train.straggler_log import describe as describe_straggler
from launcher.train.straggler_log import read_stragglers


@dataclass(frozen=True)
class ReportResult:
    """What was written and the numbers it shows."""

    out_dir: Path
    """The report directory."""
    html: Path
    """report.html."""
    loss_png: Path
    """loss.png."""
    timeline_png: Path | None
    """timeline.png (None without a trace)."""
    trace: Path | None
    """The copied trace.json (None without a trace)."""
    steps: int
    """Steps with metrics."""
    first_loss: float
    """Loss of the first step."""
    last_loss: float
    """Loss of the last step."""
    median_tokens_per_s: float
    """Median throughput over the steps."""
    measured_bubble: float | None
    """Median measured bubble fraction (None without per-rank timings)."""
    theory: TheoreticalBubble | None
    """The schedule's theoretical bubble (None without a job spec)."""
    shown_step: int | None
    """1-based step the timeline shows."""
    notes: tuple[str, ...] = field(default=())
    """What is missing and why."""
    checkpoints: tuple[CheckpointRecord, ...] = field(default=())
    """The checkpoints every attempt completed (events.jsonl)."""
    recoveries: tuple[str, ...] = field(default=())
    """One line per recovery of a failed step (the job's recoveries.jsonl)."""
    stragglers: tuple[str, ...] = field(default=())
    """One line per rank found slow or back to pace (stragglers.jsonl)."""
    goodput: Goodput | None = None
    """Where the job's wall time went (None for a run directory outside a job)."""
    efficiency: JobEfficiency | None = None
    """MFU and the suggested checkpoint interval (None with ``goodput``)."""

    def to_json(self) -> dict[str, Any]:
        return {
            "out_dir": str(self.out_dir), "html": str(self.html),
            "loss_png": str(self.loss_png),
            "timeline_png": None if self.timeline_png is None else str(self.timeline_png),
            "trace": None if self.trace is None else str(self.trace),
            "steps": self.steps, "first_loss": self.first_loss, "last_loss": self.last_loss,
            "median_tokens_per_s": self.median_tokens_per_s,
            "measured_bubble": self.measured_bubble,
            "theoretical_bubble": None if self.theory is None else self.theory.fraction,
            "theoretical_bubble_measured_costs":
                None if self.theory is None else self.theory.with_measured_costs,
            "schedule": None if self.theory is None else self.theory.describe(),
            "schedules_in_theory": None if self.theory is None else
            {name: bubble for name, bubble in self.theory.alternatives},
            "shown_step": self.shown_step, "notes": list(self.notes),
            "checkpoints": [c.to_json() for c in self.checkpoints],
            "recoveries": list(self.recoveries),
            "stragglers": list(self.stragglers),
            "goodput": None if self.goodput is None else self.goodput.to_json(),
            "mfu": None if self.efficiency is None or self.efficiency.mfu is None
            else self.efficiency.mfu.to_json(),
            "checkpoint_interval": None if self.efficiency is None
            else self.efficiency.checkpoint.to_json(),
        }


def _shown(text: str) -> str:
    """``text`` for a title or the page: bytes of a name that are not UTF-8 (carried as
    surrogates) shown as escapes, e.g. ``caf\\udce9``, which fonts and UTF-8 can carry."""
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


def _theory(spec: Path | None, events: list[TraceEvent],
            notes: list[str]) -> tuple[str | None, TheoreticalBubble | None]:
    """(job name, theoretical bubble) from the job spec, when there is one."""
    if spec is None:
        notes.append("no job spec: the theoretical bubble needs the schedule (pass --spec)")
        return None, None
    job = load_job(spec)
    par = job.parallelism
    costs = measured_op_costs(events, par.virtual_stages) if events else None
    try:
        return job.name, theoretical_bubble(par.schedule, par.pp, par.micro_batches,
                                            par.virtual_stages, costs)
    except ScheduleError as err:
        raise UserInputError(f"{spec}: parallelism: {err}") from None


def _bubble_text(value: float | None) -> str:
    return "-" if value is None else f"{value:.1%}"


def _median(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[len(ordered) // 2] if ordered else 0.0


def build_report(sources: RunSources, out_dir: Path | None = None,
                 step: int | None = None) -> ReportResult:
    """Read the run(s), draw, write; ``step``: 1-based step for the timeline (default: a
    typical one)."""
    notes: list[str] = []
    records: list[StepRecord] = merge_attempts(
        [read_metrics(d / METRICS_FILE, d.name) for d in sources.run_dirs])
    if not records:
        raise GantryError(f"{sources.run_dirs[-1] / METRICS_FILE}: no complete step yet")
    events: list[TraceEvent] = read_trace(sources.trace) if sources.trace else []
    spec_name, theory = _theory(sources.spec, events, notes)
    name = _shown(sources.name if sources.job_dir is not None or spec_name is None
                  else spec_name)
    traced = steps_in(events)
    if sources.trace is None:
        notes.append("no trace.json yet (rank 0 writes it when training ends): no timeline")
    elif not traced:
        notes.append(f"{sources.trace}: no trace events: no timeline")
    if step is not None and (step - 1) not in traced:
        shown = ", ".join(str(s + 1) for s in traced) or "none"
        raise UserInputError(f"--step: {step} is not allowed (traced steps: {shown})")
    out = (out_dir or sources.default_out).resolve()
    try:
        with made_directories(out, "--out" if out_dir is not None else None), \
                FileSet() as files:
            return _write(files, sources, name, records, events, traced, theory, out, step,
                          notes)
    finally:  # temp files of an earlier report that was killed
        for leftover in out.glob(".*") if out.is_dir() else []:
            if is_temp_name(leftover.name):
                leftover.unlink(missing_ok=True)


def _write(files: FileSet, sources: RunSources, name: str, records: list[StepRecord],
           events: list[TraceEvent], traced: list[int], theory: TheoreticalBubble | None,
           out: Path, step: int | None, notes: list[str]) -> ReportResult:
    first, last = records[0], records[-1]
    bubble = measured_bubble(records)
    checkpoints = read_checkpoints(sources.run_dirs)
    tokens = _median([r.tokens_per_s for r in records])
    loss_png = out / "loss.png"
    with files.temp_path(loss_png) as loss_tmp:
        plots.loss_figure(records, f"{name}: loss {first.loss:.3f} → {last.loss:.3f} "
                                   f"over steps {first.step}-{last.step}", loss_tmp)
    timeline_png: Path | None = None
    timeline_tmp: Path | None = None
    trace_copy: Path | None = None
    shown: int | None = None
    totals: dict[int, dict[str, float]] = {}
    if traced:
        shown0 = step - 1 if step is not None else typical_step(records, traced)
        shown = shown0 + 1
        timeline = step_timeline(events, shown0)
        totals = totals_by_rank(events)
        this = next((step_bubble(r) for r in records if r.step == shown), None)
        theory_text = ""
        if theory is not None:
            theory_text = f"; theory ({theory.describe()}) {theory.fraction:.0%} at unit costs"
            if theory.with_measured_costs is not None:
                theory_text += f", {theory.with_measured_costs:.0%} at measured op times"
        title = (f"step {shown}: bubble {_bubble_text(this)} (median over steps "
                 f"{_bubble_text(bubble)}){theory_text}")
        timeline_png = out / "timeline.png"
        with files.temp_path(timeline_png) as timeline_tmp:
            plots.timeline_figure(timeline, totals, title, timeline_tmp)
        assert sources.trace is not None
        trace_copy = out / TRACE_FILE
        with files.temp_path(trace_copy) as trace_tmp:
            shutil.copyfile(sources.trace, trace_tmp)
    summary = [
        ("run", ", ".join(_shown(str(d)) for d in sources.run_dirs)),
        ("steps", f"{first.step}-{last.step} ({len(records)} with metrics)"),
        ("loss", f"{first.loss:.4f} (step {first.step}) → {last.loss:.4f} (step {last.step})"),
        ("tokens/s", f"{tokens:,.0f} (median)"),
        ("ranks", str(len(last.ranks))),
        ("measured bubble", f"{_bubble_text(bubble)} (median over steps; native timers: "
                            "1 − Σ compute / (ranks × slowest pipeline time))"),
        ("theoretical bubble", "-" if theory is None else
         f"{theory.fraction:.1%} ({theory.describe()}, unit op costs)"
         + ("" if theory.with_measured_costs is None else
            f"; {theory.with_measured_costs:.1%} with the trace's mean op times")),
        ("every schedule in theory", "-" if theory is None else
         ", ".join(f"{n} {b:.1%}" for n, b in theory.alternatives)
         + (" (the trace's op times; `gantry schedules --trace` for more)"
            if theory.with_measured_costs is not None else " (unit op costs)")),
        ("checkpoints", describe_checkpoints(checkpoints)),
    ]
    recoveries = ([describe_recovery(r) for r in read_recoveries(sources.job_dir)]
                  if sources.job_dir is not None else [])
    summary += [(f"recovery {i}", _shown(line)) for i, line in enumerate(recoveries, 1)]
    found = read_stragglers(sources.job_dir if sources.job_dir is not None
                            else sources.run_dirs[-1])
    stragglers = [describe_straggler(r) for r in found]
    summary += [(f"straggler {i}", _shown(line)) for i, line in enumerate(stragglers, 1)]
    goodput, efficiency, tables = _goodput(sources, records, notes)
    if goodput is not None and efficiency is not None:
        ettr = goodput.ettr
        summary += [
            ("ETTR", ("-" if ettr is None else f"{ettr:.1%}")
             + f" (productive training / {goodput.wall_us / 1e6:.1f} s wall"
             + ("" if goodput.ended else ", running") + "; the goodput table below)"),
            ("MFU", "- (a CPU site)" if efficiency.mfu is None else efficiency.mfu.describe()),
            ("checkpoint interval (Young/Daly)", efficiency.checkpoint.describe()),
        ]
    attempts = []
    for run_dir in sources.run_dirs:
        mine = [r for r in records if r.attempt == run_dir.name]
        attempts.append((_shown(str(run_dir)), f"{mine[0].step}-{mine[-1].step}" if mine else "-",
                         f"{mine[0].loss:.4f} → {mine[-1].loss:.4f}" if mine else "-"))
    page = html.render_page(f"gantry report: {name}", summary, loss_tmp, timeline_tmp, totals,
                            attempts, None if trace_copy is None else trace_copy.name,
                            [_shown(note) for note in notes], tables)
    report_html = out / "report.html"
    files.write_text(report_html, page)
    return ReportResult(out, report_html, loss_png, timeline_png, trace_copy, len(records),
                        first.loss, last.loss, tokens, bubble, theory, shown, tuple(notes),
                        tuple(checkpoints), tuple(recoveries), tuple(stragglers), goodput,
                        efficiency)


def _goodput(sources: RunSources, records: list[StepRecord], notes: list[str],
             ) -> tuple[Goodput | None, JobEfficiency | None, list[html.Section]]:
    """The job's goodput and efficiency, and the goodput table (parts x total and each
    attempt: seconds and share); nothing for a run directory outside a job."""
    if sources.job_dir is None:
        notes.append("a run directory, not a job: no goodput (it needs the job's log and "
                     "meta.json)")
        return None, None, []
    goodput = job_goodput(sources.job_dir)
    efficiency = job_efficiency(sources.job_dir, goodput, [r.tokens_per_s for r in records],
                                [max((t.total_s for t in r.ranks), default=0.0)
                                 for r in records])
    notes.extend(efficiency.notes)
    notes.extend(f"goodput: {line}" for line in goodput.sources)
    columns = [("total", goodput.parts_us())] + [(a, goodput.parts_us(a))
                                                 for a in goodput.attempts]
    rows = []
    for part, meaning in PARTS:
        rows.append([part, *(f"{parts[part] / 1e6:.2f} s ({_part_share(parts, part)})"
                             for _, parts in columns), meaning])
    rows.append(["wall", *(f"{sum(parts.values()) / 1e6:.2f} s" for _, parts in columns), ""])
    table = html.Section("Goodput", ["part", *(_shown(c) for c, _ in columns), "what it holds"],
                         rows, "Every stretch of the job's wall time, from submission to its "
                         "end (or now), in exactly one part; the parts add up to the wall "
                         "time (docs/goodput.md says where each time comes from).")
    return goodput, efficiency, [table]


def _part_share(parts: dict[str, int], part: str) -> str:
    whole = sum(parts.values())
    return f"{parts[part] / whole:.1%}" if whole else "-"
