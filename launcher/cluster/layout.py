"""The run directory of an embedded cluster: where every config, key, socket, pid file,
log, spool and state file lives, so that nothing is written to /etc, /run or /var.

    <run_dir>/etc/slurm.conf, topology.conf,  generated configs (SLURM_CONF points here;
                 mpi.conf                     Slurm reads mpi.conf next to slurm.conf)
    <run_dir>/munge/                          munged key, socket, pid, log, seed
    <run_dir>/pids/<daemon>.pid               gantry's records of the processes it started
    <run_dir>/run/                            Slurm's own pid files
    <run_dir>/log/                            slurmctld.log, slurmd-<node>.log, <daemon>.out
    <run_dir>/state/                          StateSaveLocation
    <run_dir>/spool/<node>/, tmp/<node>/      SlurmdSpoolDir and TmpFS per emulated node
    <run_dir>/jobs/                           scripts and outputs of jobs gantry generated

The run directory itself is the site's (``LoadedSite.run_dir``: slurm.run_dir relative to
the site file, else $GANTRY_RUN_DIR, else /tmp/gantry-<cluster_name>).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class RunLayout:
    """Every path of one embedded cluster, derived from its run directory."""

    root: Path
    """The run directory itself."""

    @property
    def etc_dir(self) -> Path:
        return self.root / "etc"

    @property
    def slurm_conf(self) -> Path:
        return self.etc_dir / "slurm.conf"

    @property
    def topology_conf(self) -> Path:
        return self.etc_dir / "topology.conf"

    @property
    def mpi_conf(self) -> Path:
        return self.etc_dir / "mpi.conf"

    @property
    def gres_conf(self) -> Path:
        return self.etc_dir / "gres.conf"

    def gpu_device_dir(self, node: str) -> Path:
        """Where an emulated node's GPU device files (links to /dev/null) live."""
        return self.root / "dev" / node

    @property
    def munge_dir(self) -> Path:
        return self.root / "munge"

    @property
    def munge_key(self) -> Path:
        return self.munge_dir / "munge.key"

    @property
    def munge_socket(self) -> Path:
        return self.munge_dir / "munge.socket"

    @property
    def munge_pid_file(self) -> Path:
        return self.munge_dir / "munged.pid"

    @property
    def munge_log(self) -> Path:
        return self.munge_dir / "munged.log"

    @property
    def munge_seed(self) -> Path:
        return self.munge_dir / "munged.seed"

    @property
    def pid_dir(self) -> Path:
        return self.root / "pids"

    @property
    def slurm_run_dir(self) -> Path:
        return self.root / "run"

    @property
    def log_dir(self) -> Path:
        return self.root / "log"

    @property
    def state_dir(self) -> Path:
        return self.root / "state"

    @property
    def spool_root(self) -> Path:
        return self.root / "spool"

    @property
    def tmp_root(self) -> Path:
        return self.root / "tmp"

    @property
    def jobs_dir(self) -> Path:
        return self.root / "jobs"

    @property
    def slurmctld_log(self) -> Path:
        return self.log_dir / "slurmctld.log"

    def slurmd_log(self, node: str) -> Path:
        return self.log_dir / f"slurmd-{node}.log"

    def output_log(self, daemon: str) -> Path:
        """stdout/stderr of a daemon gantry started (early failures land here)."""
        return self.log_dir / f"{daemon}.out"

    def pid_record(self, daemon: str) -> Path:
        return self.pid_dir / f"{daemon}.pid"

    def daemon_log(self, daemon: str) -> Path:
        """The log a daemon writes ("munged", "slurmctld", "slurmd-n3"); munged in the
        foreground logs to its output file."""
        if daemon == "munged":
            return self.output_log("munged")
        if daemon == "slurmctld":
            return self.slurmctld_log
        return self.log_dir / f"{daemon}.log"

    def directories(self, nodes: list[str]) -> list[Path]:
        """Every directory `up` creates (root-owned, 0755; munge_dir is handed to munged)."""
        dirs = [
            self.root,
            self.etc_dir,
            self.munge_dir,
            self.pid_dir,
            self.slurm_run_dir,
            self.log_dir,
            self.state_dir,
            self.spool_root,
            self.tmp_root,
            self.jobs_dir,
        ]
        dirs += [self.spool_root / n for n in nodes]
        dirs += [self.tmp_root / n for n in nodes]
        return dirs
