"""`gantry report` on a real run: `gantry train` under mpirun (pp 2 x dp 2, 1F1B), stopped
after 4 steps and resumed from its checkpoint as a second attempt, in a job directory laid out
the way `gantry submit` makes it. The report merges both attempts, inlines its PNGs into one
self-contained HTML page, copies the trace, and the trace's ranks share one clock (a stage-1
forward never starts before the stage-0 forward that feeds it has ended)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from launcher.job_dir import create_job_dir, record_submission
from launcher.report.run_data import read_trace
from tests.integration.pipeline_helpers import REPO, gantry_train, read_metrics, write_job

pytestmark = pytest.mark.slow
MODEL = {"n_layer": 4, "n_head": 2, "n_embd": 32, "vocab_size": 64, "seq_len": 16}
TOLERANCE_S = 0.002



def test_report_of_a_restarted_pp2_dp2_run(tmp_path: Path, native_lib_path: Path) -> None:
    root = tmp_path / "jobs"
    job_file = write_job(tmp_path, "reportjob", pp=2, dp=2, schedule="1f1b", m=4,
                         model=MODEL, train={"steps": 8},
                         checkpoint={"dir": str(tmp_path / "ckpt"), "interval": 2})
    spec = yaml.safe_load(job_file.read_text())
    job_dir = create_job_dir(root / "reportjob-x", "#!/bin/sh\n", spec, {}, {}, "reportjob")
    record_submission(root, job_dir, "100")
    first, second = job_dir.path / "runs" / "100-0", job_dir.path / "runs" / "100-1"
    spec_path = job_dir.path / "spec.yaml"
    done = gantry_train(spec_path, 4, native_lib_path, "--max-steps", "4", run_dir=first)
    assert done.returncode == 0, done.stderr[-3000:]
    done = gantry_train(spec_path, 4, native_lib_path, "--resume", run_dir=second)
    assert done.returncode == 0, done.stderr[-3000:]
    assert [r["step"] for r in read_metrics(second)] == [5, 6, 7, 8]

    result = subprocess.run(
        [sys.executable, "-m", "launcher", "report", "100", "--jobs-dir", str(root), "--json"],
        capture_output=True, text=True, cwd=REPO, check=False)
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    out = job_dir.path / "report"
    assert report["out_dir"] == str(out)
    assert report["steps"] == 8
    losses = [r["loss"] for r in read_metrics(first) + read_metrics(second)]
    assert report["first_loss"] == losses[0] and report["last_loss"] == losses[-1]
    assert report["schedule"] == "1f1b pp=2 m=4"
    assert report["theoretical_bubble"] == pytest.approx(0.2)
    assert 0.0 <= report["measured_bubble"] < 1.0
    assert report["shown_step"] in range(6, 9)  # newest attempt's trace, not its first step
    saved = report["checkpoints"]  # both attempts' saves, each its shards' bytes and phases
    assert [c["step"] for c in saved] == [2, 4, 6, 8]
    for record in saved:
        shards = (tmp_path / "ckpt" / f"step_{record['step']:08d}").glob("stage_*.safetensors")
        if record["step"] >= 6:  # still kept (keep=2)
            assert record["bytes"] == sum(p.stat().st_size for p in shards)
        assert record["bytes"] > 0 and record["write_s"] > 0 and record["sync_s"] > 0
    for name in ("loss.png", "timeline.png"):
        data = (out / name).read_bytes()
        assert data.startswith(b"\x89PNG\r\n\x1a\n") and len(data) > 20_000, name
    assert (out / "trace.json").read_bytes() == (second / "trace.json").read_bytes()
    page = (out / "report.html").read_text()
    assert page.count('src="data:image/png;base64,') == 2
    assert "http" not in page.replace("ui.perfetto.dev", "")  # nothing fetched
    assert str(first) in page and str(second) in page  # both attempts listed
    assert not list(out.glob(".*.tmp"))

    # One clock for all ranks: default layout, replica r = ranks 2r (stage 0), 2r+1 (stage 1).
    # The attempt's first step (4) is left out, as the report's timeline does: a rank's first
    # native call may be delayed between its step-start clock reading and the native step.
    events = read_trace(second / "trace.json")
    spans = {(e.rank, e.step, e.name): e for e in events}
    checked = 0
    for step in range(5, 8):
        for replica in (0, 1):
            for mb in range(4):
                feed = spans[(2 * replica, step, f"forward s0 mb{mb}")]
                fed = spans[(2 * replica + 1, step, f"forward s1 mb{mb}")]
                assert fed.start_s >= feed.end_s - TOLERANCE_S, (step, replica, mb)
                grad = spans[(2 * replica + 1, step, f"backward s1 mb{mb}")]
                back = spans[(2 * replica, step, f"backward s0 mb{mb}")]
                assert back.start_s >= grad.end_s - TOLERANCE_S, (step, replica, mb)
                checked += 1
    assert checked == 24
