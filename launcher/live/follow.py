"""`gantry submit --follow`'s live view: the placement tree with stage labels, the job's log,
the preflight table once the gate decided, per-step loss / tokens/s / ETA with a progress
bar, a line per recovery and per straggler found (or back to pace), and the summary at the
end. Rich on a terminal; plain lines when piped (one line per
step instead of the bar)."""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Sequence
from pathlib import Path

from rich import box
from rich.console import Console
from rich.panel import Panel
from rich.progress import BarColumn, Progress, TaskID, TextColumn
from rich.table import Table
from rich.text import Text

from launcher.errors import GantryError
from launcher.job_dir import JobDir
from launcher.job_spec import load_job
from launcher.live.placement_view import placement_tree
from launcher.live.preflight_rows import PreflightRow, read_placement
from launcher.live.summary import FollowState, RunSummary, rows_for, summarize, summary_lines
from launcher.live.watcher import (
    AttemptStarted,
    Event,
    JobDirWatcher,
    LogLines,
    Note,
    PreflightDone,
    Recovered,
    StepDone,
    Straggler,
)
from launcher.placement_record import PlacementRecord
from launcher.report.run_data import StepRecord
from launcher.site_config import load_site
from launcher.site_topology import site_topology
from launcher.slurm import JobInfo, NodeInfo, SlurmClient
from launcher.step_labels import strip_label
from topology.model import Topology

_STATUS_STYLE = {"PASS": "green", "WARN": "yellow", "FAIL": "bold red", "ERROR": "magenta",
                 "MISSING": "red"}


def _is_trainer_step_line(line: str) -> bool:
    """`step N/M loss ...` lines of gantry's trainer (rank 0, after its rank label): the view
    shows its own step lines from the metrics instead (a command job's lines are shown as
    they are)."""
    text = strip_label(line)
    return text.startswith("step ") and " loss " in text


def format_eta(seconds: float | None) -> str:
    if seconds is None:
        return "--:--"
    seconds = max(0, round(seconds))
    return f"{seconds // 60:02d}:{seconds % 60:02d}"


class StepClock:
    """ETA from the last few steps' durations (the slowest rank's step time in the metrics;
    the live view may read several steps at once, so arrival times would mislead)."""

    def __init__(self, window: int = 5) -> None:
        self.window = window
        self.durations: list[float] = []

    def add(self, record: StepRecord) -> None:
        if record.ranks:
            seconds = max(r.total_s for r in record.ranks)
            self.durations = [*self.durations, seconds][-self.window:]

    def eta(self, step: int, total: int | None) -> float | None:
        if total is None or not self.durations:
            return None
        return sum(self.durations) / len(self.durations) * max(0, total - step)


class LiveView:
    """Prints the pieces; owns the progress bar on a terminal."""

    def __init__(self, console: Console, total_steps: int | None,
                 trainer: bool = True) -> None:
        self.console = console
        self.trainer = trainer
        """The job runs gantry's trainer (its step lines come from the metrics)."""
        self.rich = console.is_terminal
        self.total = total_steps
        self.clock = StepClock()
        self.progress: Progress | None = None
        self.task: TaskID | None = None

    def print(self, *items: object, style: str | None = None) -> None:
        self.console.print(*items, style=style, markup=False, highlight=False)

    def log(self, lines: Sequence[str]) -> None:
        for line in lines:
            if not (self.trainer and _is_trainer_step_line(line)):
                self.print(line, style="dim" if line.startswith("[gantry ") else None)

    def preflight(self, attempt: str, rows: Sequence[PreflightRow]) -> None:
        if not rows:
            self.print(f"preflight ({attempt}): off or no verdicts")
            return
        table = Table(title=f"preflight ({attempt})", box=box.SIMPLE_HEAD if self.rich else None,
                      title_justify="left", show_edge=False)
        for column in ("node", "role", "status", "finding", "outcome"):
            table.add_column(column, overflow="fold")
        for row in rows:
            table.add_row(Text(row.node), Text(row.role),
                          Text(row.status, style=_STATUS_STYLE.get(row.status, "")),
                          Text(row.finding), Text(row.outcome))
        self.console.print(table)

    def step(self, record: StepRecord) -> None:
        self.clock.add(record)
        eta = format_eta(self.clock.eta(record.step, self.total))
        total = self.total or record.step
        if not self.rich:
            self.print(f"step {record.step}/{total}  loss {record.loss:.4f}  "
                       f"{record.tokens_per_s:,.0f} tokens/s  eta {eta}")
            return
        if self.progress is None:
            self.progress = Progress(
                TextColumn("[bold]training[/]"), BarColumn(),
                TextColumn("step {task.completed:.0f}/{task.total:.0f}"),
                TextColumn("loss {task.fields[loss]}"), TextColumn("{task.fields[tps]} tok/s"),
                TextColumn("ETA {task.fields[eta]}"), console=self.console)
            self.progress.start()
            self.task = self.progress.add_task("train", total=total, loss="-", tps="-",
                                               eta="--:--")
        assert self.task is not None
        self.print(f"step {record.step}/{total}  loss {record.loss:.4f}  "
                   f"{record.tokens_per_s:,.0f} tokens/s")
        self.progress.update(self.task, completed=record.step, loss=f"{record.loss:.4f}",
                             tps=f"{record.tokens_per_s:,.0f}", eta=eta)

    def stop_progress(self) -> None:
        if self.progress is not None:
            self.progress.stop()
            self.progress = None

    def summary(self, lines: Sequence[str], ok: bool) -> None:
        self.stop_progress()
        if self.rich:
            self.console.print(Panel("\n".join(lines), title="summary", title_align="left",
                                     border_style="green" if ok else "red"))
        else:
            self.print("summary:")
            for line in lines:
                self.print(f"  {line}")


def _site_context(job_dir: JobDir) -> tuple[tuple[str, ...], Topology | None, int | None,
                                            bool]:
    """(site node names, topology, total steps, whether gantry's trainer runs) as far as the
    job directory tells (a command job: no total, not the trainer)."""
    nodes: tuple[str, ...] = ()
    topology: Topology | None = None
    total: int | None = None
    trainer = True
    try:
        request = json.loads(job_dir.request.read_text(encoding="utf-8"))
        site = load_site(Path(request["site_path"]))
        nodes = tuple(site.config.nodes.node_list())
        topology = site_topology(site)
    except (OSError, ValueError, KeyError, TypeError, GantryError):
        pass
    with contextlib.suppress(GantryError):
        spec = load_job(job_dir.spec)
        trainer = spec.command is None
        total = spec.train.steps if trainer else None
    return nodes, topology, total, trainer


def _node_states(client: SlurmClient, names: Sequence[str]) -> dict[str, NodeInfo]:
    if not names:
        return {}
    try:
        return {n.name: n for n in client.node_states(list(names))}
    except GantryError:
        return {}


class _Follower:
    def __init__(self, job_dir: JobDir, job_id: str, client: SlurmClient,
                 view: LiveView, placement: PlacementRecord, topology: Topology | None,
                 nodes: tuple[str, ...]) -> None:
        self.job_dir, self.job_id, self.client, self.view = job_dir, job_id, client, view
        self.placement, self.topology = placement, topology
        self.watcher = JobDirWatcher(job_dir, job_id, nodes)
        self.state = FollowState()

    def handle(self, events: list[Event]) -> None:
        for event in events:
            self.state.apply(event)
            if isinstance(event, LogLines):
                self.view.log(event.lines)
            elif isinstance(event, AttemptStarted) and event.name != f"{self.job_id}-0":
                how = ("relaunched in the allocation" if "." in event.name
                       else "the job was requeued")
                self.view.print(f"new attempt {event.name} ({how})", style="bold")
            elif isinstance(event, Recovered):
                self.view.print(f"recovery {event.line}", style="bold yellow")
            elif isinstance(event, Straggler):
                self.view.print(f"straggler {event.line}",
                                style="bold yellow" if event.flagged else "yellow")
            elif isinstance(event, PreflightDone):
                names = list(event.verdicts) + [r.node for r in self.placement.roles]
                states = _node_states(self.client, sorted(set(names)))
                rows = rows_for(event, self.placement, states)
                outcomes = {r.node: r.outcome for r in rows}
                if self.placement.roles:
                    self.view.console.print(placement_tree(self.topology, self.placement,
                                                           outcomes))
                self.view.preflight(event.attempt, rows)
                if event.fabric is not None:
                    self.view.print(f"fabric test ({event.attempt}): {event.fabric['message']}",
                                    style=None if event.fabric.get("status") == "PASS"
                                    else "bold yellow")
            elif isinstance(event, StepDone):
                self.view.step(event.record)
            elif isinstance(event, Note):
                self.view.print(f"note: {event.text}", style="yellow")


def follow_job(job_dir: JobDir, job_id: str, client: SlurmClient, console: Console,
               poll_s: float = 0.5, state_every_s: float = 2.0,
               timeout_s: float | None = None) -> tuple[JobInfo | None, RunSummary]:
    """Show the job live until it ends; return its last Slurm state and the summary.
    ``timeout_s``: cancel the job when it runs longer (and keep following until it ended)."""
    nodes, topology, total, trainer = _site_context(job_dir)
    placement = read_placement(job_dir.placement)
    view = LiveView(console, total, trainer)
    console.print(placement_tree(topology, placement))
    follower = _Follower(job_dir, job_id, client, view, placement, topology, nodes)
    info: JobInfo | None = None
    last_check = 0.0
    deadline = None if timeout_s is None else time.monotonic() + timeout_s
    try:
        while True:
            follower.handle(follower.watcher.poll())
            now = time.monotonic()
            if deadline is not None and now > deadline:
                deadline = None
                view.print(f"job {job_id} still running after {timeout_s:.0f} s: cancelling it",
                           style="bold red")
                client.cancel(job_id)
            if now - last_check >= state_every_s:
                last_check = now
                info = client.job_states([job_id]).get(job_id)
                if info is None or info.terminal:
                    time.sleep(poll_s)  # the last lines may land just after the state changes
                    follower.handle(follower.watcher.poll(final=True))
                    break
            time.sleep(poll_s)
    finally:
        view.stop_progress()
    names = sorted({n for d in follower.state.preflight for n in d.verdicts}
                   | {r.node for r in placement.roles})
    summary = summarize(follower.state, job_id, info, placement,
                        _node_states(client, names), job_dir.meta().get("submitted_at"))
    view.summary(summary_lines(summary), summary.state == "COMPLETED")
    return info, summary


