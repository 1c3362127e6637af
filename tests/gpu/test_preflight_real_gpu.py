"""`gantry preflight` on the GPU machine itself: every check at the quick and standard levels
against the real driver (NVML, and nvidia-smi's XML), with a site describing what is there
(the GPU count and model nvidia-smi lists). A healthy lent node must not fail a check (a warning,
e.g. an old Xid of a previous tenant, is allowed). A one-GPU VM that lists no NVLink passes
gpu.nvlink (it skips), which the unit tests pin with that VM's recorded outputs."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.gpu.gpus import need_gpus

REPO = Path(__file__).resolve().parents[2]


def _site(tmp_path: Path) -> Path:
    smi = shutil.which("nvidia-smi")
    if smi is None:
        pytest.skip("GPU test: nvidia-smi not found")
    names = subprocess.run([smi, "--query-gpu=name", "--format=csv,noheader"],
                           capture_output=True, text=True, check=True, timeout=60).stdout
    models = [line.strip() for line in names.splitlines() if line.strip()]
    site = tmp_path / "site.yaml"
    site.write_text(
        "name: device\n"
        "nodes: {names: gpu1, cpus: 1, real_memory_mb: 1000, "
        f"gpus_per_node: {len(models)}, gpu_model: {json.dumps(models[0])}}}\n"
        f"preflight: {{state_dir: {json.dumps(str(tmp_path / 'state'))}, "
        f"disk_paths: [{json.dumps(str(tmp_path))}]}}\n")
    return site


@pytest.mark.parametrize(("level", "source"), [("quick", "nvml"), ("quick", "nvidia-smi"),
                                               ("standard", "nvml")])
def test_this_node_passes_preflight(tmp_path: Path, level: str, source: str) -> None:
    need_gpus(1)
    if source == "nvml":
        pytest.importorskip("pynvml")
    site = _site(tmp_path)
    env = {k: v for k, v in os.environ.items() if k != "GANTRY_NVIDIA_SMI"}
    env["GANTRY_GPU_SOURCE"] = source
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH", "")) if p)
    result = subprocess.run([sys.executable, "-m", "launcher", "preflight", "--site", str(site),
                             "--level", level, "--json"], capture_output=True, text=True,
                            env=env, cwd=REPO, timeout=300, check=False)
    assert result.stdout.strip().startswith("{"), result.stderr[-2000:]
    verdict = json.loads(result.stdout)
    failed = [(c["id"], c["observed"]) for c in verdict["checks"] if c["status"] == "FAIL"]
    assert not failed and verdict["status"] in ("PASS", "WARN"), failed
    assert result.returncode == 0, result.stderr[-2000:]
    ran = {c["id"] for c in verdict["checks"] if c["status"] == "PASS"}
    assert {"gpu.inventory", "gpu.ecc", "gpu.row_remap", "gpu.power"} <= ran
    if level == "standard":
        assert {"gpu.gemm", "gpu.membw"} <= ran
