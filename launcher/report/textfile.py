"""The run's metrics in Prometheus' text exposition format, one file per node for
node-exporter's textfile collector (``gantry_<job id>_<node>.prom``), each replaced
atomically (temp file in the same directory, fsync, rename: launcher/atomic_write.py), so the
collector never reads half a file.

What each node's file holds (every sample labelled ``job`` and ``node``):

- always: ``gantry_job_info`` (name, attempt), ``gantry_node_in_job`` (1 while the newest
  attempt runs ranks there, else 0), ``gantry_metrics_updated_timestamp_seconds``;
- the per-rank timers of the newest step record (``gantry_rank_timer_seconds{rank, timer}``)
  of the ranks on that node (ranks/<R>.start names each rank's node);
- the health events recorded for that node (``gantry_health_events_total{check, grade}``);
- on rank 0's node only (so that a sum over nodes counts a job once): the step, step time,
  tokens/s and loss of the newest step record, the goodput parts, wall time and ETTR, and
  the failed-step, recovery and checkpoint counts.

Names follow Prometheus' conventions: the ``gantry_`` prefix, base units in the name
(``_seconds``), ``_total`` for counters, ``_ratio`` for a ratio.

What one node's file needs is all that is read for it: the job-level figures (the goodput's
read of the whole history) only on rank 0's node, the health events of that node's own event
files. With a ReadCache (launcher/report/read_cache.py: the run monitor keeps one) a rewrite
reads of the growing files only what was appended since the last, and each rank's start
record once.
"""

from __future__ import annotations

import json
import math
import time
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import launcher.job_dir as names
from launcher.atomic_write import write_text
from launcher.errors import UserInputError
from launcher.job_dir import (
    HEALTH_DIR,
    LAUNCH_NODES_FILE,
    METRICS_FILE,
    RECOVERIES_FILE,
    RUNS_DIR,
    attempt_key,
)
from launcher.recovery.node_faults import RECOVERIES_READ_LIMIT, recovery_record
from launcher.report.goodput import PARTS, Goodput, job_goodput
from launcher.report.job_times import json_lines, start_records
from launcher.report.read_cache import Fold, ReadCache, fold_lines
from launcher.report.run_data import TIMING_KEYS, StepRecord, parse_record


@dataclass(frozen=True)
class Family:
    """One metric family: its name, type, help and samples (labels, value)."""

    name: str
    kind: str
    help: str
    samples: tuple[tuple[dict[str, str], float], ...]


def _escape_label(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _value(number: float) -> str:
    if math.isnan(number):
        return "NaN"
    if math.isinf(number):
        return "+Inf" if number > 0 else "-Inf"
    return repr(float(number))


def render(families: Sequence[Family]) -> str:
    """The exposition text of ``families`` (families without samples left out)."""
    lines: list[str] = []
    for family in families:
        if not family.samples:
            continue
        sample_name = family.name + ("_total" if family.kind == "counter" else "")
        shown = family.help.replace("\\", "\\\\").replace("\n", "\\n")
        lines += [f"# HELP {sample_name} {shown}", f"# TYPE {sample_name} {family.kind}"]
        for labels, number in family.samples:
            text = ",".join(f'{key}="{_escape_label(value)}"' for key, value in labels.items())
            lines.append(f"{sample_name}{{{text}}} {_value(number)}")
    return "\n".join(lines) + "\n" if lines else ""


def _attempts(job_dir: Path) -> list[Path]:
    runs = job_dir / RUNS_DIR
    found = [p for p in runs.iterdir() if p.is_dir() and attempt_key(p.name) is not None] \
        if runs.is_dir() else []
    return sorted(found, key=lambda p: attempt_key(p.name) or ())


def _mtime(path: Path) -> float:
    try:
        return path.stat().st_mtime
    except OSError:
        return 0.0


def _last_record(job_dir: Path) -> StepRecord | None:
    """The newest complete, well-formed step record of the run directory under runs/ (the
    job's ``runs/<job name>/``) whose metrics.jsonl changed last."""
    runs = job_dir / RUNS_DIR
    found = [p for p in runs.iterdir() if (p / METRICS_FILE).is_file()] if runs.is_dir() else []
    for attempt in sorted(found, key=lambda p: _mtime(p / METRICS_FILE), reverse=True):
        for line in reversed(_tail_lines(attempt / METRICS_FILE)):
            if not line.strip():
                continue
            try:
                return parse_record(line, str(attempt / METRICS_FILE), attempt.name)
            except UserInputError:
                continue
    return None


def _tail_lines(path: Path, chunk: int = 1 << 16) -> list[str]:
    """The complete lines at the end of ``path``, read backwards in growing pieces until one
    complete line is in (a long run's metrics.jsonl is not read whole every interval)."""
    try:
        with open(path, "rb") as handle:
            size = handle.seek(0, 2)
            while True:
                start = max(size - chunk, 0)
                handle.seek(start)
                data = handle.read(size - start)
                lines = data.decode("utf-8", errors="replace").split("\n")[:-1]
                if start > 0:
                    lines = lines[1:]  # cut off at its start
                if lines or start == 0:
                    return lines
                chunk *= 4
    except OSError:
        return []


def _rank_node(path: Path) -> tuple[int, str] | None:
    """(rank, node) of one ``ranks/<R>.start`` record."""
    records = json_lines(path)
    record = records[0] if records else {}
    rank, node = record.get("rank"), record.get("node")
    if isinstance(rank, int) and not isinstance(rank, bool) and isinstance(node, str):
        return rank, node
    return None


def rank_nodes(attempt: Path, cache: ReadCache | None = None) -> dict[int, str]:
    """World rank -> node, from the attempt's ranks/<R>.start records (with ``cache``, each
    read once per inode: a rank writes its record once)."""
    return dict(start_records(attempt, "rank node", _rank_node, cache))


def _launch_nodes(attempt: Path) -> list[str]:
    try:
        text = (attempt / LAUNCH_NODES_FILE).read_text(encoding="utf-8")
    except OSError:
        return []
    return [n for n in text.strip().split(",") if n]


def _health(attempts: list[Path], nodes: list[str] | None,
            cache: ReadCache | None) -> Counter[tuple[str, str, str]]:
    """(node, check, grade) -> WARN and FAIL events of the run monitor, over every attempt
    (launcher/monitor/run.py: one JSONL per node in each attempt's node-health/), from the
    files of ``nodes`` (None: of every node)."""
    from launcher.monitor.run import HEALTH_READ_LIMIT, health_event, health_file

    def counted(state: None, line: str) -> tuple[None, tuple[str, str, str] | None]:
        event = health_event(line)
        if event is None:
            return None, None
        node, check, grade = event.get("node"), event.get("check"), event.get("grade")
        if isinstance(node, str) and isinstance(check, str) and grade in ("WARN", "FAIL"):
            return None, (node, check, str(grade))
        return None, None

    fold = Fold("health events", None, counted)
    counts: Counter[tuple[str, str, str]] = Counter()
    for where in attempts:
        if nodes is None:
            try:
                paths = sorted(p for p in (where / HEALTH_DIR).iterdir() if p.suffix == ".jsonl")
            except OSError:
                continue
        else:
            paths = [health_file(where, node) for node in nodes
                     if "/" not in node and "\0" not in node]
        for path in paths:
            counts.update(fold_lines(path, fold, cache, HEALTH_READ_LIMIT))
    return counts


def _recovery(state: None, line: str) -> tuple[None, bool | None]:
    return None, True if recovery_record(line) is not None else None


_RECOVERIES = Fold("recoveries", None, _recovery)


@dataclass(frozen=True)
class JobMetrics:
    """What the textfiles show of one job, read once."""

    job_id: str
    name: str
    attempt: str
    """The newest attempt directory's name ("" before the first)."""
    nodes: tuple[str, ...]
    """The nodes the newest attempt runs ranks on."""
    rank_nodes: dict[int, str]
    last: StepRecord | None
    goodput: Goodput | None
    """None when read for nodes other than rank 0's (which alone shows it)."""
    recoveries: int
    health: Counter[tuple[str, str, str]]
    earlier_nodes: tuple[str, ...] = ()
    """Nodes earlier attempts ran ranks on (read for every node only)."""

    @property
    def lead_node(self) -> str | None:
        """The node of rank 0 (which carries the job-level samples)."""
        return self.rank_nodes.get(0) or (self.nodes[0] if self.nodes else None)

    def to_json(self) -> dict[str, Any]:
        last = self.last
        return {
            "job_id": self.job_id, "name": self.name, "attempt": self.attempt,
            "nodes": list(self.nodes), "lead_node": self.lead_node,
            "rank_nodes": {str(r): n for r, n in sorted(self.rank_nodes.items())},
            "step": None if last is None else last.step,
            "loss": None if last is None else last.loss,
            "tokens_per_s": None if last is None else last.tokens_per_s,
            "step_s": None if last is None or not last.ranks else
            max(r.total_s for r in last.ranks),
            "rank_timers_s": {} if last is None else {
                str(rank): {key: getattr(timing, key) for key in TIMING_KEYS}
                for rank, timing in enumerate(last.ranks)},
            "goodput": None if self.goodput is None else self.goodput.to_json(),
            "recoveries": self.recoveries,
            "health_events": [{"node": n, "check": c, "grade": g, "count": k}
                              for (n, c, g), k in sorted(self.health.items())],
        }


def read_job_metrics(job_dir: Path, state: dict[str, Any] | None = None,
                     now: float | None = None, nodes: list[str] | None = None,
                     cache: ReadCache | None = None) -> JobMetrics:
    """Read the job directory once (``state``: Slurm's view as `gantry status` records it)
    for the files of ``nodes`` (None: of every node; see the module docstring); ``cache``:
    what earlier reads parsed (a reader that rewrites the files again and again)."""
    try:
        meta = json.loads((job_dir / names.META_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError):
        meta = {}
    meta = meta if isinstance(meta, dict) else {}
    attempts = _attempts(job_dir)
    newest = attempts[-1] if attempts else None
    ranks = rank_nodes(newest, cache) if newest is not None else {}
    in_job = tuple(dict.fromkeys(
        [ranks[r] for r in sorted(ranks)] or (_launch_nodes(newest) if newest else [])))
    lead = ranks.get(0) or (in_job[0] if in_job else None)
    goodput = job_goodput(job_dir, state, now, cache) \
        if nodes is None or lead in nodes else None
    recoveries = len(fold_lines(job_dir / RECOVERIES_FILE, _RECOVERIES, cache,
                                RECOVERIES_READ_LIMIT))
    earlier = () if nodes is not None else tuple(dict.fromkeys(
        n for a in attempts[:-1] for n in [*rank_nodes(a, cache).values(), *_launch_nodes(a)]))
    return JobMetrics(str(meta.get("job_id") or ""), str(meta.get("name") or job_dir.name),
                      "" if newest is None else newest.name, in_job, ranks,
                      _last_record(job_dir), goodput, recoveries,
                      _health(attempts, nodes, cache), earlier)


PART_HELP = dict(PARTS)


def node_families(metrics: JobMetrics, node: str, now: float) -> list[Family]:
    """The metric families of ``node``'s file."""
    base = {"job": metrics.job_id, "node": node}
    families = [
        Family("gantry_job_info", "gauge", "A gantry job on this node (always 1): its name "
               "and newest attempt directory.",
               (({**base, "name": metrics.name, "attempt": metrics.attempt}, 1.0),)),
        Family("gantry_node_in_job", "gauge", "1 while the job's newest attempt runs ranks on "
               "this node, else 0.", ((base, 1.0 if node in metrics.nodes else 0.0),)),
        Family("gantry_metrics_updated_timestamp_seconds", "gauge",
               "When gantry wrote this file (unix time).", ((base, now),)),
    ]
    last = metrics.last
    if last is not None:
        mine = [(rank, t) for rank, t in enumerate(last.ranks)
                if metrics.rank_nodes.get(rank) == node]
        families.append(Family(
            "gantry_rank_timer_seconds", "gauge",
            "Per-rank native timers of the newest step (compute, send, recv, bubble, sync, "
            "total).", tuple(({**base, "rank": str(rank), "timer": key.removesuffix("_s")},
                              getattr(timing, key)) for rank, timing in mine
                             for key in TIMING_KEYS)))
    families.append(Family(
        "gantry_health_events", "counter", "Health events the run's monitor recorded for this "
        "node, by check and grade.",
        tuple(({**base, "check": check, "grade": grade}, float(count))
              for (n, check, grade), count in sorted(metrics.health.items()) if n == node)))
    if node != metrics.lead_node:
        return families
    goodput = metrics.goodput
    if goodput is None:  # read for other nodes only
        return families
    if last is not None:
        families += [
            Family("gantry_step", "gauge", "The newest step recorded (1-based).",
                   ((base, float(last.step)),)),
            Family("gantry_step_duration_seconds", "gauge", "The newest step's time on its "
                   "slowest rank.", ((base, max((r.total_s for r in last.ranks),
                                                default=math.nan)),)),
            Family("gantry_tokens_per_second", "gauge", "The newest step's global tokens / "
                   "its slowest rank's step time.", ((base, last.tokens_per_s),)),
            Family("gantry_loss", "gauge", "The newest step's mean training loss.",
                   ((base, last.loss),)),
        ]
    ettr = goodput.ettr
    families += [
        Family("gantry_goodput_seconds", "gauge", "The job's wall time by part (docs/"
               "goodput.md): " + "; ".join(f"{k}: {v}" for k, v in PARTS) + ".",
               tuple(({**base, "part": part}, us / 1e6)
                     for part, us in goodput.parts_us().items())),
        Family("gantry_wall_seconds", "gauge", "Submission to the job's end (or now).",
               ((base, goodput.wall_us / 1e6),)),
        Family("gantry_ettr_ratio", "gauge", "Effective training time ratio: productive "
               "training / wall time.", ((base, math.nan if ettr is None else ettr),)),
        Family("gantry_failed_steps", "counter", "Training steps that failed (all attempts).",
               ((base, float(goodput.failures)),)),
        Family("gantry_recoveries", "counter", "Recoveries inside the allocation.",
               ((base, float(metrics.recoveries)),)),
        Family("gantry_checkpoints", "counter", "Checkpoints completed (all attempts).",
               ((base, float(goodput.checkpoints)),)),
    ]
    return families


def textfile_name(job_id: str, node: str) -> str:
    """The file name of ``node``'s metrics of job ``job_id``."""
    return f"gantry_{job_id}_{node}.prom"


def write_textfiles(job_dir: Path, out_dir: Path, nodes: Iterable[str] | None = None,
                    state: dict[str, Any] | None = None, now: float | None = None,
                    cache: ReadCache | None = None) -> list[Path]:
    """Write (replace) ``<out_dir>/gantry_<job>_<node>.prom`` for ``nodes`` (default: the
    nodes of the job's newest attempt; then also remove this job's files of nodes that left
    it). Returns the files written. The per-node monitor passes its own node, and its
    ``cache`` (read_job_metrics)."""
    wanted = None if nodes is None else list(dict.fromkeys(nodes))
    metrics = read_job_metrics(job_dir, state, now, wanted, cache)
    when = time.time() if now is None else now
    chosen = list(metrics.nodes) if wanted is None else wanted
    if not metrics.job_id:
        raise UserInputError(f"{job_dir}: no job id in {names.META_FILE} (not submitted)")
    if not out_dir.is_dir():
        raise UserInputError(f"{out_dir}: not a directory (the textfile collector's "
                             "directory must exist)")
    written = []
    for node in chosen:
        path = out_dir / textfile_name(metrics.job_id, node)
        write_text(path, render(node_families(metrics, node, when)), mode=0o644)
        written.append(path)
    if wanted is None:  # nodes an earlier attempt ran on, gone from the job since
        for node in sorted(set(metrics.earlier_nodes) - set(chosen)):
            (out_dir / textfile_name(metrics.job_id, node)).unlink(missing_ok=True)
    return written
