"""`gantry report`'s checkpoint line (launcher/report/checkpoints.py) on hand-written
events.jsonl files: every attempt's checkpoint events in order, torn or foreign lines skipped,
older events without sizes and times still listed, medians and the disk rate from the phases."""

from __future__ import annotations

import json
from pathlib import Path

from launcher.report.checkpoints import CheckpointRecord, describe, read_checkpoints


def _write(run_dir: Path, *lines: str) -> Path:
    run_dir.mkdir(parents=True)
    (run_dir / "events.jsonl").write_text("".join(line + "\n" for line in lines))
    return run_dir


def _event(step: int, after: int, **extra: object) -> str:
    return json.dumps({"event": "checkpoint", "time": 1.0, "step": step,
                       "completed_after_step": after, **extra})


def test_events_of_every_attempt_in_order(tmp_path: Path) -> None:
    phases = {"bytes": 2_000_000_000, "copy_s": 0.1, "write_s": 1.5, "sync_s": 0.5}
    first = _write(tmp_path / "100-0", json.dumps({"event": "start", "step": 0}),
                   _event(2, 2, **phases), _event(4, 5, **phases), '{"event": "checkp')
    second = _write(tmp_path / "100-1", "not json", _event(6, 6, **phases),
                    json.dumps({"event": "checkpoint", "step": "8"}), json.dumps([1, 2]))
    records = read_checkpoints((first, second, tmp_path / "missing"))
    assert [(r.step, r.completed_after_step) for r in records] == [(2, 2), (4, 5), (6, 6)]
    assert records[0] == CheckpointRecord(2, 2, 2_000_000_000, 0.1, 1.5, 0.5)
    text = describe(records)
    assert text.startswith("3 (steps 2, 4, 6); per save (median): 2.00 GB, copy to host "
                           "0.10 s, write + checksum 1.50 s, sync 0.50 s, 1.00 GB/s to disk")
    assert text.endswith("complete up to 1 step(s) after the save (background writes)")


def test_older_events_without_phases_are_listed(tmp_path: Path) -> None:
    run = _write(tmp_path / "r", _event(3, 3), _event(6, 6, bytes=True, copy_s="x"))
    records = read_checkpoints((run,))
    assert records[1] == CheckpointRecord(6, 6, None, None, None, None)
    assert describe(records) == "2 (steps 3, 6)"
    small = [CheckpointRecord(2, 2, 10_400_000, 0.01, 0.02, 0.03)]
    assert "per save (median): 10.40 MB," in describe(small) and "208.00 MB/s" in describe(small)
    assert describe([]).startswith("none recorded")
