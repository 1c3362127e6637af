"""A GPU site on the embedded cluster: `nodes.gpus_per_node: 2` gives every emulated node two
GPUs in Slurm (Gres=gpu:2, device files linked to /dev/null), so what gantry does for GPU
sites runs against a real slurmctld here: `gantry site check` sees the GPUs; Slurm schedules
`--gpus-per-node` steps and numbers CUDA_VISIBLE_DEVICES; `gantry submit --follow` of a
pp=2 x dp=2 job asks `--ntasks-per-node=2 --gpus-per-node=2`, its gate runs the GPU checks on
both nodes (a recorded 2 x H200 `nvidia-smi` through GANTRY_NVIDIA_SMI, the override real
sites use), and the 4 ranks (CPU backend) train like the PyTorch reference."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from launcher.placement_record import read_placement_record
from launcher.preflight.gate import read_verdicts
from tests.embedded_cluster import REPO_ROOT, EmbeddedCluster, start_embedded_cluster
from tests.integration.pipeline_helpers import ODD_MODEL, reference_losses
from tests.integration.sbatch_train_run import SEED, SETTINGS, STEPS, TRAIN
from tests.unit.preflight_helpers import FAKE_DMESG, FAKE_SMI, FIXTURES, HEALTHY

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def gpu_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedCluster]:
    tmp = tmp_path_factory.mktemp("gpu-site")
    overrides = {
        "nodes": {"names": "n[1-8]", "cpus": 2, "real_memory_mb": 2000,
                  "gpus_per_node": 2, "gpu_model": "NVIDIA H200"},
        "preflight": {"level": "quick", "state_dir": str(tmp / "state"),
                      "max_drain_fraction": 0.5, "disk_paths": [str(tmp)],
                      "thresholds": {"disk_free_gb_min": 0.1},
                      # the GPUs are recorded outputs: the fabric test moves host memory
                      "fabric": {"backend": "mpi"}},
    }
    with start_embedded_cluster(overrides=overrides) as cluster:
        yield cluster


def gantry(cluster: EmbeddedCluster, cwd: Path, *args: str,
           **env: str) -> subprocess.CompletedProcess[str]:
    full = {**cluster.env, "GANTRY_JOBS_DIR": str(cwd / "jobs"), **env}
    return subprocess.run([sys.executable, "-m", "launcher", *args], capture_output=True,
                          text=True, cwd=cwd, env=full, timeout=400, check=False)


def test_site_check_sees_two_gpus_per_node(gpu_cluster: EmbeddedCluster) -> None:
    result = gantry(gpu_cluster, REPO_ROOT, "site", "check", "--site",
                    str(gpu_cluster.site_path), "--json")
    checks = {c["id"]: c for c in json.loads(result.stdout)["checks"]}
    assert checks["gpus"]["status"] == "PASS", checks["gpus"]
    assert checks["gpus"]["observed"] == "2 GPUs (Gres=) on all 8 nodes"
    assert result.returncode == 0, result.stdout


def test_cluster_status_names_the_emulated_gpus(gpu_cluster: EmbeddedCluster) -> None:
    status = gantry(gpu_cluster, REPO_ROOT, "cluster", "status", "--site",
                    str(gpu_cluster.site_path))
    assert status.returncode == 0, status.stderr
    assert "; 8 nodes (2 emulated GPUs each): " in status.stdout.splitlines()[0]


def test_slurm_allocates_the_emulated_gpus(gpu_cluster: EmbeddedCluster) -> None:
    out = gpu_cluster.run("srun", "-N2", "--ntasks-per-node=1", "--gpus-per-node=2",
                          "bash", "-c", "echo $SLURMD_NODENAME=$CUDA_VISIBLE_DEVICES").stdout
    lines = out.split()
    assert len(lines) == 2 and len({line.split("=")[0] for line in lines}) == 2, out
    assert all(line.endswith("=0,1") for line in lines), out
    refused = gpu_cluster.run("srun", "-N1", "--gpus-per-node=3", "--immediate=5", "true",
                              check=False)
    assert refused.returncode != 0
    assert "Requested node configuration is not available" in refused.stderr


def test_a_gpu_job_gates_and_trains_two_ranks_per_node(gpu_cluster: EmbeddedCluster,
                                                       tmp_path: Path) -> None:
    pp, dp, m = 2, 2, 2
    expected = reference_losses(dp * m, 2, tmp_path / "init.safetensors", SETTINGS, SEED)
    body: dict[str, Any] = {
        "name": "gpu-site-pp2-dp2", "model": ODD_MODEL,
        "parallelism": {"pp": pp, "dp": dp, "schedule": "1f1b", "micro_batches": m,
                        "micro_batch_size": 2},
        "train": {**TRAIN, "init_weights": "init.safetensors"},
        "resources": {"nodes": 2, "spares": 1, "time_limit": "00:10:00"},
        "policy": {"preflight_level": "quick"},
        "env": {"OMP_NUM_THREADS": "1"},
    }
    job = tmp_path / "job.yaml"
    job.write_text(yaml.safe_dump(body, sort_keys=False))
    result = gantry(gpu_cluster, tmp_path, "submit", str(job), "--site",
                    str(gpu_cluster.site_path), "--follow",
                    GANTRY_NVIDIA_SMI=str(FAKE_SMI), GANTRY_FAKE_SMI_DIR=str(HEALTHY),
                    GANTRY_DMESG=str(FAKE_DMESG),
                    GANTRY_FAKE_DMESG_FILE=str(FIXTURES / "dmesg" / "clean.txt"))
    assert result.returncode == 0, (result.stdout[-3000:], result.stderr[-3000:])
    assert "training finished" in result.stdout
    job_dir = Path(result.stdout.split(": ", 1)[1].splitlines()[0])
    script = (job_dir / "job.sbatch").read_text()
    assert "#SBATCH --ntasks-per-node=2" in script
    assert "#SBATCH --gpus-per-node=2" in script
    placement = read_placement_record(job_dir / "placement.json")
    assert len(placement.rank_nodes) == 2 and len(placement.spare_nodes) == 1
    allocated = [*placement.rank_nodes, *placement.spare_nodes]
    text = next(job_dir.glob("runs/*-0/preflight.jsonl")).read_text()
    verdicts, problems = read_verdicts(text, allocated)  # srun's labelled output, as the gate
    assert not problems and sorted(verdicts) == sorted(allocated)
    for verdict in verdicts.values():
        gpu = {c.id: c for c in verdict.checks if c.id.startswith("gpu.")}
        assert gpu["gpu.inventory"].status == "PASS", gpu["gpu.inventory"]
        assert gpu["gpu.inventory"].observed.startswith("2 x NVIDIA H200")
        assert verdict.status == "PASS"
    records = [json.loads(line) for line in
               (job_dir / "runs" / body["name"] / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records] == list(range(1, STEPS + 1))
    assert len(records[0]["ranks"]) == pp * dp
    assert [r["loss"] for r in records] == pytest.approx(expected, rel=1e-5)
