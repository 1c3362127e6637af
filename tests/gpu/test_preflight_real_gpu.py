"""`gantry preflight` on the GPU machine itself: every check at the quick and standard levels
against the real driver (NVML, and nvidia-smi's XML), with a site describing what is there
(the GPU count and model nvidia-smi lists). A healthy lent node must pass; session 14 found
the one-GPU VM failing gpu.nvlink this way (no NVLink listed), which the unit tests now pin."""

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
        f"nodes: {{names: gpu1, cpus: {os.cpu_count()}, real_memory_mb: 1000, "
        f"gpus_per_node: {len(models)}, gpu_model: {json.dumps(models[0])}}}\n"
        f"preflight: {{state_dir: {json.dumps(str(tmp_path / 'state'))}, "
        f"disk_paths: [{json.dumps(str(tmp_path))}]}}\n")
    return site


@pytest.mark.parametrize(("level", "source"), [("quick", "nvml"), ("quick", "nvidia-smi"),
                                               ("standard", "nvml")])
def test_this_node_passes_preflight(tmp_path: Path, level: str, source: str) -> None:
    need_gpus(1)
    site = _site(tmp_path)
    env = {**os.environ, "GANTRY_GPU_SOURCE": source, "PYTHONPATH": str(REPO) + (
        ":" + os.environ["PYTHONPATH"] if os.environ.get("PYTHONPATH") else "")}
    result = subprocess.run([sys.executable, "-m", "launcher", "preflight", "--site", str(site),
                             "--level", level, "--json"], capture_output=True, text=True,
                            env=env, cwd=REPO, timeout=300, check=False)
    verdict = json.loads(result.stdout)
    bad = [(c["id"], c["status"], c["observed"]) for c in verdict["checks"]
           if c["status"] not in ("PASS", "SKIP")]
    assert verdict["status"] == "PASS" and result.returncode == 0, bad
    ran = {c["id"] for c in verdict["checks"] if c["status"] == "PASS"}
    assert {"gpu.inventory", "gpu.ecc", "gpu.row_remap", "gpu.power"} <= ran
    if level == "standard":
        assert {"gpu.gemm", "gpu.membw"} <= ran
