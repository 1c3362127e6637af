"""`gantry demo` end to end on the session's embedded cluster (its own ports and run dir, so
a user's cluster is untouched): build, data from the repo's docs, fault drill on a planned
node, submit + live view, report. The gate must exclude and drain exactly the broken node, the
spare must train in its place, the loss must go down, the report must exist, and the drill's
drain must be lifted at the end."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from launcher.preflight.slurm_nodes import parse_show_node
from tests.embedded_cluster import EmbeddedCluster
from topology import hostlists

pytestmark = pytest.mark.slow
REPO = Path(__file__).resolve().parents[2]


def test_demo_end_to_end(embedded_cluster: EmbeddedCluster, tmp_path: Path) -> None:
    c = embedded_cluster
    c.cancel_all()
    c.wait_all_idle()  # the demo plans 5 of the 8 nodes and drills on one of them
    try:
        result = subprocess.run(
            [sys.executable, "-m", "launcher", "demo", "--site", str(c.site_path),
             "--work-dir", str(tmp_path), "--steps", "30", "--json"],
            capture_output=True, text=True, cwd=REPO, env=c.env, timeout=600, check=False)
        view = result.stderr
        assert result.returncode == 0, view[-5000:]
        demo = json.loads(result.stdout)
        faulty, planned = demo["faulty_node"], demo["planned"]
        assert len(planned) == 5 and faulty == planned[1]
        summary = demo["summary"]
        assert summary["state"] == "COMPLETED" and summary["steps"] == 30
        assert summary["loss_went_down"] and summary["last_loss"] < summary["first_loss"] - 0.5
        assert [e["node"] for e in summary["excluded"]] == [faulty]
        assert summary["excluded"][0]["outcome"] == (
            "excluded, drained: gantry:net.ib_ports:mlx5_0-1-down")
        assert faulty not in summary["nodes_used"] and planned[4] in summary["nodes_used"]
        assert sorted(summary["nodes_used"]) == sorted(planned[:1] + planned[2:])
        # The gate followed the plan (placement.json): the spare took the broken node's place.
        logs = "".join(p.read_text() for p in (Path(demo["job_dir"]) / "logs").iterdir())
        assert f"{planned[4]} takes planned {faulty}'s place" in logs, logs[-3000:]
        # The gate writes its node list to a file; the job's log has no bare copy of it.
        assert hostlists.collect(summary["nodes_used"]) not in logs.splitlines()
        report = demo["report"]
        assert report["steps"] == 30 and report["theoretical_bubble"] == pytest.approx(0.2)
        for key in ("html", "loss_png", "timeline_png", "trace"):
            assert Path(report[key]).is_file(), key
        assert [c["step"] for c in report["checkpoints"]] == [15, 30]  # interval steps // 2
        assert demo["restored"] is True
        assert demo["site_check"] == "PASS"  # the build exists by then: nothing to warn about
        state = parse_show_node(c.run("scontrol", "show", "node", "-o", faulty).stdout)[faulty]
        assert "DRAIN" not in state.state and state.reason is None
        # The view: each step announced with its command, the table, the steps, the summary.
        for text in ("1/6 embedded Slurm cluster", "$ gantry build --site", "$ gantry data",
                     "$ gantry submit", "step 30/30", "summary:", "loss went down",
                     f"{faulty} excluded, drained", "$ gantry report",
                     "checkpoints 2 (steps 15, 30)", "demo done in", "$ gantry site check",
                     "site check: PASS ("):
            assert text in view, text
    finally:
        c.cancel_all()
        c.run("scontrol", "update", "NodeName=ALL", "State=RESUME", check=False)
