"""A check that gantry's own install cannot run is a setup error, never a node FAIL: standard
preflight on a GPU node whose gantry Python has no torch reports gpu.gemm and gpu.membw as
ERROR (naming what to install), the node's status is ERROR, its verdict has no drain reason,
and the gate keeps the node, drains nothing and names the setup error. (torch is made
unimportable for the active test's child process by a PYTHONPATH entry whose torch.py raises
what a missing torch raises.)"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from launcher.preflight.gate import run_gate
from launcher.preflight.node_policy import apply_node_policy
from launcher.site_config import load_site
from tests.unit.preflight_helpers import HEALTHY, gpu_env, run

REPO = Path(__file__).resolve().parents[2]


def no_torch_env(tmp_path: Path) -> dict[str, str]:
    """The fake-GPU environment, with `import torch` failing as on an install without it."""
    shim = tmp_path / "no-torch"
    shim.mkdir()
    (shim / "torch.py").write_text(
        'raise ModuleNotFoundError("No module named \'torch\'", name="torch")\n')
    path = os.pathsep.join(filter(None, [str(shim), str(REPO), os.environ.get("PYTHONPATH")]))
    return gpu_env(HEALTHY, PYTHONPATH=path)


def test_missing_torch_is_a_setup_error_not_a_node_failure(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    verdict = run(no_torch_env(tmp_path), level="standard")
    checks = {c.id: c for c in verdict.checks}
    for cid in ("gpu.gemm", "gpu.membw"):
        check = checks[cid]
        assert check.status == "ERROR", check
        assert "cannot import torch (No module named 'torch')" in check.observed, check
        assert f"{sys.executable} -m pip install torch" in check.action, check
    assert [c.id for c in verdict.checks if c.status == "FAIL"] == []
    assert verdict.status == "ERROR"
    assert verdict.drain_reason() is None

    site = load_site(REPO / "site_configs" / "local.yaml")
    report = run_gate(site, [verdict.node], 1, "standard", job_id=None, requeue=False,
                      timeout_s=60, reports=json.dumps(verdict.to_dict()) + "\n")
    assert report.decision.decision == "go" and report.decision.nodes == [verdict.node]
    assert report.actions == []  # neither drained nor counted as a clean pass
    assert report.decision.message.endswith(
        f"; setup error on {verdict.node}: gpu.gemm, gpu.membw could not run (install torch "
        f"into gantry's environment: {sys.executable} -m pip install torch); gantry's install, "
        "not the nodes: not drained")
    node = report.to_dict()["verdicts"][verdict.node]
    assert node["status"] == "ERROR" and node["reason"] is None
    assert sorted(node["setup_errors"]) == ["gpu.gemm", "gpu.membw"]

    apply_node_policy(site, verdict)  # the HealthCheckProgram / Prolog path: no policy at all
    assert capsys.readouterr().err == (
        f"gantry preflight: {verdict.node}: keep (setup error of gantry's install, not the "
        "node's: the drain policy is not applied)\n")
