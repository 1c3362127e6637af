"""read_job_times with a ReadCache (what the run monitor does every sample) equals a fresh
whole read at every point of a job directory that grows in random chunks: lines cut mid-way,
requeues that start a new attempt and set records aside (metrics.jsonl replaced by rename,
metrics.replayed.jsonl appended: the trainer's own set_aside_after), relaunches without a log
line, files truncated, removed or given bytes that are not UTF-8."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from launcher.job_dir import (
    EVENTS_FILE,
    LOGS_DIR,
    METRICS_FILE,
    RANKS_DIR,
    REPLAYED_METRICS_FILE,
    RUNS_DIR,
    log_file_name,
)
from launcher.report.goodput import breakdown
from launcher.report.job_times import read_job_times
from launcher.report.read_cache import ReadCache
from launcher.train.metrics import set_aside_after
from tests.unit.goodput_dirs import JOB, T0, job_dir, stamp

FILES = ("log", "events", "metrics", "replayed")
GARBAGE = (b"\xc3", b"\x80\n", b"{\"step\": 1, \"time\": 5}", b"\r", "\u2028".encode(),
           b"not json\n", b"{\"event\": \"start\", \"time\": \"x\"}\n")


class Job:
    """A job directory being written: bytes per file that are due but not all on disk yet."""

    def __init__(self, root: Path) -> None:
        self.path = job_dir(root, state={"state": "RUNNING", "terminal": False})
        self.run = self.path / RUNS_DIR / "tiny"
        self.run.mkdir()
        self.files = {"log": self.path / LOGS_DIR / log_file_name(JOB),
                      "events": self.run / EVENTS_FILE, "metrics": self.run / METRICS_FILE,
                      "replayed": self.run / REPLAYED_METRICS_FILE}
        self.due = dict.fromkeys(FILES, b"")
        self.now = T0 + 10
        self.restart = -1
        self.relaunch = 0
        self.step = 0

    def tick(self, seconds: float) -> float:
        self.now += seconds
        return self.now

    def owe(self, name: str, text: str) -> None:
        self.due[name] += text.encode()

    def log(self, message: str) -> None:
        self.owe("log", f"[gantry {stamp(self.tick(0.25))}] {message}\n")

    def record(self, name: str, record: dict[str, Any]) -> None:
        self.owe(name, json.dumps(record, sort_keys=True) + "\n")

    def flush(self, name: str, size: int) -> None:
        data, self.due[name] = self.due[name][:size], self.due[name][size:]
        with open(self.files[name], "ab") as handle:
            handle.write(data)

    def flush_all(self) -> None:
        for name in FILES:
            self.flush(name, len(self.due[name]))

    def start(self) -> None:
        """A batch script start (restart + 1) that launches the step, whose loop starts."""
        self.restart += 1
        self.relaunch = 0
        (self.path / RUNS_DIR / f"{JOB}-{self.restart}").mkdir()
        self.log(f"job {JOB} (restart {self.restart} of at most 3) on n[1-4]")
        self.log("launching pp=2 x dp=1 on n1,n2")
        self.record("events", {"event": "start", "time": self.tick(1.0), "step": self.step})

    def steps(self, count: int, checkpoint_s: float) -> None:
        for _ in range(count):
            self.step += 1
            self.record("metrics", {"step": self.step, "loss": 5.0, "lr": 3e-4,
                                    "time": self.tick(1.0), "checkpoint_s": checkpoint_s})
            self.owe("log", f"step {self.step}/100 loss 4.123456 norm 1.0000\n")
        if checkpoint_s:
            self.record("events", {"event": "checkpoint", "time": self.tick(0.1),
                                   "step": self.step})

    def fail_and_requeue(self, resume_at: int) -> None:
        """The step dies, the script requeues; the next start resumes at ``resume_at`` and
        sets the later records aside as the trainer does."""
        self.log("training step failed with exit code 137")
        self.log(f"requeueing to resume from the last checkpoint (restart {self.restart + 1})")
        self.tick(5.0)
        self.flush_all()
        self.step = min(self.step, resume_at)
        set_aside_after(self.run, self.step)
        self.start()

    def relaunch_without_log(self) -> None:
        """A relaunch inside the allocation whose "launching" line is lost: its launch comes
        from its ranks' start records."""
        self.relaunch += 1
        attempt = self.path / RUNS_DIR / f"{JOB}-{max(self.restart, 0)}.{self.relaunch}"
        (attempt / RANKS_DIR).mkdir(parents=True)
        (attempt / RANKS_DIR / "0.start").write_text(json.dumps(
            {"rank": 0, "node": "n1", "pid": 1, "time": self.tick(0.5)}))
        self.record("events", {"event": "start", "time": self.tick(0.5), "step": self.step})

    def end(self, finished: bool) -> None:
        self.record("events", {"event": "end", "time": self.tick(0.5), "step": self.step,
                               "checkpoint_s": 0.25})
        self.log("training finished" if finished else "stopped by SIGTERM")


OPS = st.one_of(
    st.tuples(st.just("steps"), st.integers(1, 4), st.sampled_from([0.0, 0.0, 0.3])),
    st.tuples(st.just("flush"), st.sampled_from(FILES), st.integers(0, 200)),
    st.tuples(st.just("requeue"), st.integers(0, 12)),
    st.tuples(st.just("relaunch")),
    st.tuples(st.just("end"), st.booleans()),
    st.tuples(st.just("garbage"), st.sampled_from(FILES), st.sampled_from(GARBAGE)),
    st.tuples(st.just("truncate"), st.sampled_from(FILES), st.integers(0, 300)),
    st.tuples(st.just("remove"), st.sampled_from(FILES)),
)


def apply(job: Job, op: tuple[Any, ...]) -> None:
    kind = op[0]
    if kind == "steps":
        job.steps(op[1], op[2])
    elif kind == "flush":
        job.flush(op[1], op[2])
    elif kind == "requeue":
        job.fail_and_requeue(op[1])
    elif kind == "relaunch":
        job.flush_all()
        job.relaunch_without_log()
    elif kind == "end":
        job.end(op[1])
    elif kind == "garbage":
        job.due[op[1]] += op[2]
    elif kind == "truncate":
        path = job.files[op[1]]
        if path.exists():
            os.truncate(path, min(op[2], path.stat().st_size))
    elif kind == "remove":
        job.files[op[1]].unlink(missing_ok=True)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(OPS, min_size=1, max_size=30))
def test_incremental_reads_equal_whole_reads_after_every_chunk(
        ops: list[tuple[Any, ...]]) -> None:
    with tempfile.TemporaryDirectory() as root:
        job = Job(Path(root))
        cache = ReadCache()
        job.start()
        for op in [*ops, ("flush_all",)]:
            if op[0] == "flush_all":
                job.flush_all()
            else:
                apply(job, op)
            cached = read_job_times(job.path, cache=cache)
            assert cached == read_job_times(job.path)
        assert breakdown(cached, job.now) == breakdown(read_job_times(job.path), job.now)

