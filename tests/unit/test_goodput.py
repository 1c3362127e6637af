"""Goodput of hand-built job directories: every part where its time is, and the parts adding
up to the wall time exactly (a clean run, a requeue, a recovery inside the allocation with
replayed steps, a running job)."""

from __future__ import annotations

from pathlib import Path

import pytest

from launcher.report.goodput import PART_NAMES, Goodput, describe_lines, job_goodput
from tests.unit.goodput_dirs import JOB, T0, attempt, job_dir, log

ENDED = {"state": "COMPLETED", "terminal": True, "start_time": int(T0 + 10),
         "end_time": int(T0 + 19)}


def seconds(goodput: Goodput, attempt_name: str | None = None) -> dict[str, float]:
    return {k: round(v / 1e6, 6) for k, v in goodput.parts_us(attempt_name).items() if v}


def assert_adds_up(goodput: Goodput) -> None:
    parts = goodput.parts_us()
    assert list(parts) == list(PART_NAMES)
    assert sum(parts.values()) == goodput.wall_us == round(goodput.end * 1e6) - round(
        goodput.start * 1e6)
    assert sum(sum(goodput.parts_us(a).values()) for a in goodput.attempts) == goodput.wall_us


def test_a_clean_run(tmp_path: Path) -> None:
    path = job_dir(tmp_path, state=ENDED)
    log(path, [(T0 + 10, f"job {JOB} (restart 0 of at most 3) on n[1-4]"),
               (T0 + 10.1, "preflight on 4 nodes, level quick"),
               (T0 + 12, "preflight step finished with exit code 0"),
               (T0 + 12.5, "launching pp=2 x dp=1 on n1,n2"),
               (T0 + 19, "training finished")])
    attempt(path, f"{JOB}-0", T0 + 15, [(1, T0 + 16, 0.0), (2, T0 + 17, 0.0),
                                        (3, T0 + 18, 0.3)],
            end=(T0 + 18.4, 0.2), checkpoints=(2, 3))
    goodput = job_goodput(path)
    assert seconds(goodput) == {"queue": 10.0, "preflight_gate": 2.5, "startup": 2.5,
                                "training": 2.7, "checkpoint": 0.5, "other": 0.8}
    assert_adds_up(goodput)
    assert goodput.wall_us == 19_000_000
    assert goodput.ettr == pytest.approx(2.7 / 19)
    assert goodput.mean_checkpoint_s == pytest.approx(0.25)
    assert goodput.sources == ()
    lines = describe_lines(goodput)
    assert lines[0] == "19.0 s wall, ETTR 14.2%"
    assert lines[1].startswith("total: queue 10.00 s (52.6%), preflight_gate 2.50 s")


def test_a_requeue_counts_the_lost_steps_as_recomputed(tmp_path: Path) -> None:
    path = job_dir(tmp_path, state={**ENDED, "end_time": int(T0 + 60)})
    log(path, [(T0 + 10, f"job {JOB} (restart 0 of at most 3) on n[1-4]"),
               (T0 + 11, "launching pp=2 x dp=1 on n1,n2"),
               (T0 + 16.5, "training step failed with exit code 137"),
               (T0 + 17, "requeueing to resume from the last checkpoint (restart 1 of 3)"),
               (T0 + 40, f"job {JOB} (restart 1 of at most 3) on n[1-3,5]"),
               (T0 + 41, "launching pp=2 x dp=1 on n1,n3"),
               (T0 + 50, "training finished")])
    # restart 0: steps 1-4, checkpoint after step 2, dies in step 5
    attempt(path, f"{JOB}-0", T0 + 12, [(1, T0 + 13, 0.0), (2, T0 + 14, 0.0),
                                        (3, T0 + 15, 0.5), (4, T0 + 16, 0.0)],
            checkpoints=(2,))
    # restart 1 resumes from step 2: steps 3-5 again
    attempt(path, f"{JOB}-1", T0 + 43, [(3, T0 + 44, 0.0), (4, T0 + 45, 0.0),
                                        (5, T0 + 46, 0.0)], end=(T0 + 46.5, 0.5),
            checkpoints=(5,))
    goodput = job_goodput(path)
    assert seconds(goodput) == {
        "queue": 10.0,
        "preflight_gate": 1.0 + 1.0,           # each script's start -> its launch
        "startup": 1.0 + 2.0,
        "training": 2.0 + 3.0,                 # steps 1, 2 of restart 0; 3-5 of restart 1
        "checkpoint": 0.5 + 0.5,
        "recomputed": 0.5 + 1.0,               # steps 3 (less its checkpoint wait) and 4
        "recovery": 1.0 + 23.0,                # step 4 -> script's last line -> restart 1
        "other": 3.5 + 10.0,                   # loop end -> script end -> Slurm's end time
    }
    assert_adds_up(goodput)
    assert goodput.failures == 1 and goodput.recomputed_steps == 2
    assert seconds(goodput, f"{JOB}-1")["recovery"] == 23.0
    assert goodput.sources == ("end: Slurm's end time (later than the last record)",)


def test_a_recovery_inside_the_allocation_with_replayed_steps(tmp_path: Path) -> None:
    path = job_dir(tmp_path, state=ENDED | {"end_time": 0})
    log(path, [(T0 + 1, f"job {JOB} (restart 0 of at most 3) on n[1-3]"),
               (T0 + 2, "launching pp=2 x dp=1 on n1,n2"),
               (T0 + 8, "training step failed with exit code 137"),
               (T0 + 9, "recovery 1 of 3 in this allocation: relaunching on n1,n3"),
               (T0 + 9.5, "launching pp=2 x dp=1 on n1,n3"),
               (T0 + 15, "training finished")])
    attempt(path, f"{JOB}-0", T0 + 3, [(1, T0 + 4, 0.0), (2, T0 + 5, 0.0), (3, T0 + 6, 0.25)],
            checkpoints=(2,))
    # The relaunch resumed in place once before (a replayed record of step 3 at T0+11.5,
    # then a second start): every record of metrics.replayed.jsonl is recomputed work.
    attempt(path, f"{JOB}-0.1", T0 + 10.5, [(3, T0 + 12.5, 0.0), (4, T0 + 13.5, 0.0)],
            end=(T0 + 14, 0.0), checkpoints=(4,), replayed=[(3, T0 + 11.5)])
    with open(path / "runs" / "tiny" / "events.jsonl", "a", encoding="utf-8") as handle:
        handle.write('{"event": "start", "time": %r, "step": 2}\n' % (T0 + 12.0))
        handle.write('{"torn": \n')
    goodput = job_goodput(path)
    assert seconds(goodput) == {
        "queue": 1.0, "preflight_gate": 1.0, "startup": 1.0 + 1.0,
        "training": 2.0 + 0.5 + 1.0,   # steps 1, 2; step 3 (12.0 -> 12.5), step 4
        "checkpoint": 0.25,
        "recomputed": 0.75 + 1.0,      # step 3 of the failed attempt; the replayed record
        "recovery": 3.5 + 0.5,         # step 3 -> the relaunch; replayed -> the second start
        "other": 1.5,                  # loop end (T0+14) -> the script's last line
    }
    assert_adds_up(goodput)
    assert goodput.attempts == (f"{JOB}-0", f"{JOB}-0.1")
    assert seconds(goodput, f"{JOB}-0.1")["recovery"] == 4.0


def test_a_running_job_ends_now_in_the_part_it_is_in(tmp_path: Path) -> None:
    path = job_dir(tmp_path, state={"state": "RUNNING", "terminal": False})
    log(path, [(T0 + 2, f"job {JOB} (restart 0 of at most 3) on n[1-3]"),
               (T0 + 3, "launching pp=2 x dp=1 on n1,n2")])
    attempt(path, f"{JOB}-0", T0 + 4, [(1, T0 + 5, 0.0)])
    goodput = job_goodput(path, now=T0 + 5.75)
    assert seconds(goodput) == {"queue": 2.0, "preflight_gate": 1.0, "startup": 1.0,
                                "training": 1.75}
    assert not goodput.ended
    assert_adds_up(goodput)
    log(path, [(T0 + 6, "training step failed with exit code 137")])
    recovering = job_goodput(path, now=T0 + 7)
    assert seconds(recovering)["recovery"] == 2.0
    assert describe_lines(recovering)[0].startswith("7.0 s wall (running), ETTR 14.3%")


def test_pending_and_fallbacks(tmp_path: Path) -> None:
    path = job_dir(tmp_path, submitted=None, state={"state": "PENDING", "terminal": False})
    goodput = job_goodput(path, now=T0 + 3)
    assert seconds(goodput) == {"queue": 4.0}
    assert goodput.sources == ("submitted: meta.json created_at (no submitted_at)",)
    assert_adds_up(goodput)


def test_clock_skew_never_makes_a_negative_part(tmp_path: Path) -> None:
    path = job_dir(tmp_path, state=ENDED)
    log(path, [(T0 + 10, f"job {JOB} (restart 0 of at most 3) on n[1-4]"),
               (T0 + 12, "launching pp=2 x dp=1 on n1,n2"),
               (T0 + 19, "training finished")])
    # the ranks' clock runs 1.5 s behind the batch host's
    attempt(path, f"{JOB}-0", T0 + 11, [(1, T0 + 11.5, 0.0), (2, T0 + 16, 9.0)],
            end=(T0 + 17, 0.0))
    goodput = job_goodput(path)
    assert all(s.end_us > s.start_us for s in goodput.segments)
    assert_adds_up(goodput)
    assert seconds(goodput)["checkpoint"] == 4.0  # clipped to its step's stretch
