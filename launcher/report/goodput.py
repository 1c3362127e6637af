"""Goodput: where a job's wall time went, from submission to its end (or now), over all its
attempts (requeues and recoveries inside the allocation), and the effective training time
ratio (ETTR = productive training / wall time).

The job's recorded times (launcher/report/job_times.py) are put in time order as one chain of
boundaries: submitted, then per restart the script's start, per attempt its launch, its loop
start, for every step record the end of the checkpoint wait before it and the record itself,
the loop's end; the script's last line; the end. Each boundary is clamped to be no earlier
than the one before (clock skew between nodes, a missing record), and the stretch from one
boundary to the next gets the part named in :data:`PARTS`. The parts therefore add up to the
wall time exactly: they are whole microseconds, and their sum telescopes to end - submitted.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, NamedTuple

from launcher.report.job_times import AttemptTimes, JobTimes, read_job_times
from launcher.report.read_cache import ReadCache

PARTS: tuple[tuple[str, str], ...] = (
    ("queue", "submitted -> the batch script's first start (waiting in Slurm's queue)"),
    ("preflight_gate", "the batch script's start -> the training step's launch: its set-up, "
                       "the preflight step and the gate"),
    ("startup", "launch -> the training loop's start: processes, MPI/NCCL, layout, "
                "schedule, checkpoint load"),
    ("training", "productive steps: the steps whose results are in the run's trajectory"),
    ("checkpoint", "the loop's time in checkpoint calls: the copy to host memory, a "
                   "synchronous write, waits for a background write"),
    ("recomputed", "steps whose work was lost and run again after a resume (the copies a "
                   "later run replaced: metrics.replayed.jsonl, or an earlier attempt's "
                   "records of steps a later one ran again)"),
    ("recovery", "a failed (or stopped) step's last record -> the next launch: the failed "
                 "step's lost partial work, gantry recover, the relaunch; or the requeue "
                 "and the wait in the queue again"),
    ("other", "what no record covers: the step's shut-down after its loop ended (trace, "
              "MPI finalize, srun's exit) and the script's end"),
)
"""Each part's name and what it holds, in the order shown."""
PART_NAMES = tuple(name for name, _ in PARTS)


class Segment(NamedTuple):
    """One stretch of the chain (or several in a row of one part), in whole microseconds
    since the epoch."""

    start_us: int
    end_us: int
    part: str
    attempt: str
    """The attempt directory it leads up to or runs in."""


class Goodput(NamedTuple):
    """A job's wall time split into :data:`PARTS`."""

    job_id: str
    start: float
    """Submission (unix time)."""
    end: float
    """The job's end, or now while it runs."""
    ended: bool
    segments: tuple[Segment, ...]
    failures: int
    """Failed training steps (the scripts' "training step failed" lines)."""
    checkpoints: int
    """Checkpoints completed, all attempts."""
    recomputed_steps: int
    """Step records that a later run replaced."""
    sources: tuple[str, ...] = ()
    """Where times came from where not from the primary source (job_times.py)."""

    @property
    def wall_us(self) -> int:
        return sum(s.end_us - s.start_us for s in self.segments)

    def parts_us(self, attempt: str | None = None) -> dict[str, int]:
        """Microseconds per part (every part, in PARTS order), of ``attempt`` or of all."""
        totals = dict.fromkeys(PART_NAMES, 0)
        for segment in self.segments:
            if attempt is None or segment.attempt == attempt:
                totals[segment.part] += segment.end_us - segment.start_us
        return totals

    @property
    def attempts(self) -> tuple[str, ...]:
        """The attempts, in order."""
        return tuple(dict.fromkeys(s.attempt for s in self.segments))

    @property
    def ettr(self) -> float | None:
        """Productive training / wall time (None for a zero wall time)."""
        wall = self.wall_us
        return self.parts_us()["training"] / wall if wall > 0 else None

    @property
    def mean_checkpoint_s(self) -> float | None:
        """The loop's mean time per checkpoint (None before the first one)."""
        if not self.checkpoints:
            return None
        return self.parts_us()["checkpoint"] / 1e6 / self.checkpoints

    def to_json(self) -> dict[str, Any]:
        def seconds(parts: dict[str, int]) -> dict[str, float]:
            return {name: us / 1e6 for name, us in parts.items()}

        return {
            "start": self.start, "end": self.end, "ended": self.ended,
            "wall_s": self.wall_us / 1e6, "wall_us": self.wall_us,
            "parts_s": seconds(self.parts_us()), "parts_us": self.parts_us(),
            "ettr": self.ettr,
            "attempts": [{"attempt": name, "wall_s": sum(self.parts_us(name).values()) / 1e6,
                          "parts_s": seconds(self.parts_us(name))} for name in self.attempts],
            "failures": self.failures, "checkpoints": self.checkpoints,
            "mean_checkpoint_s": self.mean_checkpoint_s,
            "recomputed_steps": self.recomputed_steps, "sources": list(self.sources),
        }


class _Chain:
    """Boundaries in order; each stretch gets a part, the open end the part now running.
    Stretches in a row of one part and attempt are one segment (a run's steps between two
    checkpoint waits: one training segment)."""

    def __init__(self, origin: float, attempt: str) -> None:
        self.last = round(origin * 1e6)
        self.segments: list[Segment] = []
        self.open = "queue"
        self.attempt = attempt

    def to(self, when: float | None, part: str, attempt: str, opens: str | None = None) -> None:
        if when is None:
            return
        us = max(self.last, round(when * 1e6))
        if us > self.last:
            segments = self.segments
            if segments and segments[-1].part == part and segments[-1].attempt == attempt:
                segments[-1] = Segment(segments[-1].start_us, us, part, attempt)
            else:
                segments.append(Segment(self.last, us, part, attempt))
        self.last = us
        self.attempt = attempt
        if opens is not None:
            self.open = opens

    def close(self, when: float, part: str) -> None:
        self.to(when, part, self.attempt)


def _superseded(attempts: tuple[AttemptTimes, ...]) -> set[tuple[int, int, int]]:
    """(attempt, run, record) indexes of the step records a later record of the same step
    replaced, and of every metrics.replayed.jsonl record."""
    latest: dict[int, tuple[int, int, int]] = {}
    replaced: set[tuple[int, int, int]] = set()
    for a, attempt in enumerate(attempts):
        for r, run in enumerate(attempt.runs):
            for s, step in enumerate(run.steps):
                if step.replayed:
                    replaced.add((a, r, s))
                    continue
                if step.step in latest:
                    replaced.add(latest[step.step])
                latest[step.step] = (a, r, s)
    return replaced


def _first_time(times: JobTimes) -> float | None:
    candidates = [s.start for s in times.scripts] + [a.launch for a in times.attempts] + [
        r.start for a in times.attempts for r in a.runs]
    return min((t for t in candidates if t is not None), default=None)


def breakdown(times: JobTimes, now: float | None = None) -> Goodput:
    """Split ``times`` into :data:`PARTS`; ``now`` ends a job that still runs (default: the
    clock)."""
    origin = times.submitted if times.submitted is not None else _first_time(times)
    sources = list(times.sources)
    if origin is None:
        origin = now if now is not None else time.time()
        sources.append("no record of the job's submission or start")
    elif times.submitted is None:
        sources.append("submitted: the first recorded time (no meta.json submission time)")
    replaced = _superseded(times.attempts)
    scripts = {s.restart: s for s in times.scripts}
    restarts = sorted(set(scripts) | {a.restart for a in times.attempts})
    first_name = times.attempts[0].name if times.attempts else f"{times.job_id}-0"
    chain = _Chain(origin, first_name)
    for order, restart in enumerate(restarts):
        mine = [(i, a) for i, a in enumerate(times.attempts) if a.restart == restart]
        lead = mine[0][1].name if mine else f"{times.job_id}-{restart}"
        script = scripts.get(restart)
        if script is not None:
            chain.to(script.start, "queue" if order == 0 else "recovery", lead,
                     opens="preflight_gate")
        for position, (a, attempt) in enumerate(mine):
            chain.to(attempt.launch, "preflight_gate" if position == 0 else "recovery",
                     attempt.name, opens="startup")
            for r, run in enumerate(attempt.runs):
                chain.to(run.start, "startup" if r == 0 else "recovery", attempt.name,
                         opens="training")
                for s, step in enumerate(run.steps):
                    stall_end = chain.last / 1e6 + step.checkpoint_s
                    chain.to(min(stall_end, step.time), "checkpoint", attempt.name)
                    chain.to(step.time, "recomputed" if (a, r, s) in replaced else "training",
                             attempt.name, opens="training")
                if run.close is not None:
                    stall_end = chain.last / 1e6 + run.close_checkpoint_s
                    chain.to(min(stall_end, run.close), "checkpoint", attempt.name)
                    chain.to(run.close, "other", attempt.name, opens="other")
        later = order + 1 < len(restarts)
        if script is not None and (later or times.ended):
            chain.to(script.last, "recovery" if later else "other", chain.attempt,
                     opens="recovery")
        elif script is not None and script.failed_last:  # running: recovering right now
            chain.to(script.last, "recovery", chain.attempt, opens="recovery")
    if times.ended:
        end = times.end if times.end is not None else chain.last / 1e6
        chain.close(end, "other")
    else:
        chain.close(now if now is not None else time.time(), chain.open)
    steps_replaced = len(replaced)
    failures = sum(s.failures for s in times.scripts)
    return Goodput(times.job_id, origin, chain.last / 1e6, times.ended, tuple(chain.segments),
                   failures, sum(a.checkpoints for a in times.attempts), steps_replaced,
                   tuple(sources))


def job_goodput(job_dir: Path, state: dict[str, Any] | None = None,
                now: float | None = None, cache: ReadCache | None = None) -> Goodput:
    """The goodput of job directory ``job_dir`` (``state``: Slurm's view, as `gantry status`
    records it; default: meta.json's last record; ``cache``: read_job_times')."""
    return breakdown(read_job_times(job_dir, state, cache), now)


def _share(us: int, wall: int) -> str:
    return f"{us / wall:.1%}" if wall > 0 else "-"


def describe_lines(goodput: Goodput) -> list[str]:
    """Compact text: the wall time and ETTR, then one line of parts for the whole job and one
    per attempt (parts that are zero left out)."""
    wall = goodput.wall_us
    ettr = goodput.ettr
    head = (f"{wall / 1e6:.1f} s wall{'' if goodput.ended else ' (running)'}, ETTR "
            f"{'-' if ettr is None else f'{ettr:.1%}'}")
    if goodput.failures:
        head += f", {goodput.failures} failed step(s)"

    def parts(values: dict[str, int], whole: int) -> str:
        shown = [f"{name} {us / 1e6:.2f} s ({_share(us, whole)})"
                 for name, us in values.items() if us > 0]
        return ", ".join(shown) or "-"

    lines = [head, f"total: {parts(goodput.parts_us(), wall)}"]
    for name in goodput.attempts:
        mine = goodput.parts_us(name)
        lines.append(f"{name}: {parts(mine, sum(mine.values()))}")
    return lines


def status_goodput(job_dir: Path, row: dict[str, Any]) -> dict[str, Any]:
    """`gantry status JOB`'s goodput: the breakdown as JSON with its compact text
    (``lines``); ``row``: the job's status row (Slurm's state, or the last recorded one; a
    job Slurm no longer knows counts as ended)."""
    state = {**row, "terminal": True} if row.get("stale") else row
    goodput = job_goodput(job_dir, state)
    return {**goodput.to_json(), "lines": describe_lines(goodput)}
