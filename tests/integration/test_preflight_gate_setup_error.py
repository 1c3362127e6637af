"""The gate on the real embedded Slurm cluster, at the standard level, where gantry's Python
on every node lacks torch: gpu.gemm and gpu.membw cannot run. That is gantry's setup error,
not the nodes' fault: no node is drained, the job goes on with both nodes, and the gate's
line names what to install. (Without torch those checks FAILed and drained healthy nodes.)"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import yaml

from tests.embedded_cluster import EmbeddedCluster
from tests.integration.test_preflight_gate import (
    _write,
    fault_env,
    gate_script,
    gpu_site,
    node_states,
    restore,
)

NODES = ["n7", "n8"]


def test_gate_does_not_drain_for_a_missing_torch(embedded_cluster: EmbeddedCluster,
                                                  tmp_path: Path) -> None:
    c = embedded_cluster
    site = gpu_site(c, tmp_path)
    data = yaml.safe_load(site.read_text())
    data["preflight"]["level"] = "standard"
    site.write_text(yaml.safe_dump(data))
    shim = tmp_path / "no-torch"
    shim.mkdir()
    (shim / "torch.py").write_text(
        'raise ModuleNotFoundError("No module named \'torch\'", name="torch")\n')
    env = fault_env(tmp_path, {})
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(shim), c.env.get("PYTHONPATH")]))
    out = tmp_path / "job"
    try:
        job = c.run("sbatch", "--parsable", "-N2", f"--nodelist={','.join(NODES)}",
                    f"--output={tmp_path}/job.log",
                    str(_write(tmp_path / "job.sh", gate_script(site, out, "--no-requeue"))),
                    env=env).stdout.strip()
        info = c.wait_job(job, timeout=120)
        log = (tmp_path / "job.log").read_text()
        assert info.state == "COMPLETED", log
        report = json.loads(out.with_suffix(".json").read_text())
        assert report["decision"] == "go", report
        assert report["node_list"] == NODES and report["drained"] == [], report
        for node in NODES:
            verdict = report["verdicts"][node]
            assert verdict["status"] == "ERROR" and verdict["reason"] is None, verdict
            assert sorted(verdict["setup_errors"]) == ["gpu.gemm", "gpu.membw"], verdict
        assert (f"setup error on n[7-8]: gpu.gemm, gpu.membw could not run (install torch "
                f"into gantry's environment: {sys.executable} -m pip install torch); gantry's "
                "install, not the nodes: not drained") in log
        assert out.with_suffix(".ran").read_text().split() == NODES
        states = node_states(c)
        for node in NODES:
            assert "DRAIN" not in states[node][0] and states[node][1] is None, states[node]
    finally:
        restore(c, NODES)
