"""MPI start-up across emulated nodes: every PMIx fence of an `srun --mpi=pmix` step must be
a barrier, or Open MPI's MPI_Init races (a fast rank sends to a peer that has not registered
its receive callbacks yet, and the peer segfaults).

Slurm's default tree fence is node-local when TreeWidth exceeds the step's node count; the
embedded cluster's mpi.conf pins the ring fence (launcher/cluster/render.py). The rate of the
race itself is measured by bench/mpi_startup_stress.py, not here (docs/embedded-cluster.md).
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from tests.embedded_cluster import EmbeddedCluster

PROBE = Path(__file__).with_name("pmix_fence_probe.py")


@pytest.mark.parametrize("nodes", [2, 4])
def test_pmix_fence_without_data_waits_for_every_node(
    embedded_cluster: EmbeddedCluster, tmp_path: Path, nodes: int
) -> None:
    # The last rank enters the fence 2 s late; no rank may leave it before that.
    c = embedded_cluster
    result = c.run(
        "srun", f"--nodes={nodes}", "--ntasks-per-node=1", "--mpi=pmix",
        sys.executable, str(PROBE), str(tmp_path), "2",
        check=False,
    )
    assert result.returncode == 0, f"stdout: {result.stdout}\nstderr: {result.stderr}"
    assert sorted(p.name for p in tmp_path.iterdir()) == [f"entered-{r}" for r in range(nodes)]


def test_cluster_runs_with_the_rendered_mpi_conf(embedded_cluster: EmbeddedCluster) -> None:
    c = embedded_cluster
    mpi_conf = (c.run_dir / "etc" / "mpi.conf").read_text()
    assert "PMIxCollFence=ring" in mpi_conf.splitlines()


def test_up_refuses_a_running_cluster_whose_mpi_conf_differs(
    embedded_cluster: EmbeddedCluster,
) -> None:
    c = embedded_cluster
    path = c.run_dir / "etc" / "mpi.conf"
    original = path.read_text()
    path.write_text(original.replace("PMIxCollFence=ring", "PMIxCollFence=mixed"))
    try:
        result = c.gantry("cluster", "up", "--site", str(c.site_path))
    finally:
        path.write_text(original)
    assert result.returncode == 1
    assert "runs with a different mpi.conf" in result.stderr
