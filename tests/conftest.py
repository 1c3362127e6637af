"""Shared pytest fixtures. The one most tests need: ``embedded_cluster``.

``embedded_cluster`` (session scope) is a real Slurm cluster started by gantry on this
host: munged, slurmctld and 8 slurmd ("n1".."n8", 2 CPUs each, partition "debug") in the
local site's switch tree (leaf1..leaf4 of 2 nodes, spine1..2, core). It comes up once per
test session, in a fresh temp dir and on free ports, so it never touches a user's
cluster, and it is torn down at the end (scripts/test.sh also tears down leftovers when
pytest is killed). Every test that uses it is marked ``cluster`` automatically.

It is an ``tests.embedded_cluster.EmbeddedCluster``:

    def test_two_nodes(embedded_cluster: EmbeddedCluster) -> None:
        c = embedded_cluster
        job = c.sbatch("-N2", "--wrap=srun hostname")      # -> job id
        info = c.wait_job(job)                              # JobInfo(state, reason, ...)
        assert info.state == "COMPLETED"
        out = c.srun("-N2", "--mpi=pmix", "python3", "-c", "...")  # CompletedProcess
        c.run("scontrol", "show", "topology")               # any Slurm tool
        c.gantry("status", "--site", str(c.site_path))      # this checkout's CLI

- ``c.env``: environment for Slurm commands (SLURM_CONF, the site's MPI env, PYTHONPATH
  with this checkout) -- pass it to your own subprocesses;
- ``c.site_path``: the generated site YAML (``--site`` for gantry commands);
- ``c.run_dir``: configs in ``etc/``, logs in ``log/`` (look there when a job misbehaves);
- ``c.cancel_all()``: empty the queue. Leave the cluster as you found it: cancel your jobs,
  resume nodes you drained (other tests share the cluster).

Need a cluster of another shape, or one you may break? Use
``tests.embedded_cluster.start_embedded_cluster(overrides={...})`` as a context manager
(a few seconds to start; ``overrides`` replace site sections such as nodes/topology).
Env knobs: GANTRY_TEST_PORT_BASE (fixed ports), GANTRY_TEST_TMPDIR (where run dirs go),
GANTRY_TEST_KEEP_RUN_DIR=1 (keep logs after a clean run).
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.embedded_cluster import EmbeddedCluster, start_embedded_cluster


@pytest.fixture(scope="session")
def embedded_cluster() -> Iterator[EmbeddedCluster]:
    """The session's embedded 8-node Slurm cluster (see the module docstring)."""
    with start_embedded_cluster() as cluster:
        yield cluster


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark every test that uses the embedded cluster with ``cluster``."""
    for item in items:
        if "embedded_cluster" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.cluster)
