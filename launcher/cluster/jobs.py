"""Following a Slurm job of the embedded cluster to its end (`scontrol show job -o`)."""

from __future__ import annotations

import time
from dataclasses import dataclass

from launcher.cluster import client
from launcher.cluster.layout import RunLayout
from launcher.errors import GantryError

FINISHED_STATES = frozenset(
    {
        "COMPLETED",
        "FAILED",
        "CANCELLED",
        "TIMEOUT",
        "NODE_FAIL",
        "PREEMPTED",
        "OUT_OF_MEMORY",
        "BOOT_FAIL",
        "DEADLINE",
    }
)


@dataclass(frozen=True)
class JobInfo:
    """The fields of `scontrol show job` gantry looks at."""

    job_id: str
    state: str
    """JobState, e.g. PENDING, RUNNING, COMPLETED, FAILED."""
    reason: str
    """Reason (why pending / why failed), "None" when none."""
    exit_code: str
    """ExitCode as "status:signal"."""
    nodes: str
    """NodeList (hostlist), "(null)" before it runs."""

    @property
    def finished(self) -> bool:
        return self.state in FINISHED_STATES


def parse_show_job(text: str) -> dict[str, str]:
    """Key=Value tokens of one `scontrol show job -o` line."""
    return client.parse_key_values(text)


def job_info(layout: RunLayout, job_id: str) -> JobInfo:
    result = client.run(layout, "scontrol", ["show", "job", "-o", job_id])
    if result.returncode != 0:
        raise GantryError(f"scontrol show job {job_id}: {result.stderr.strip()}")
    fields = parse_show_job(result.stdout)
    return JobInfo(
        job_id=job_id,
        state=fields.get("JobState", "UNKNOWN"),
        reason=fields.get("Reason", "None"),
        exit_code=fields.get("ExitCode", "?"),
        nodes=fields.get("NodeList", "(null)"),
    )


def wait_for_job(layout: RunLayout, job_id: str, timeout: float) -> JobInfo:
    """Poll until the job finished; GantryError naming its state after ``timeout``."""
    deadline = time.monotonic() + timeout
    while True:
        info = job_info(layout, job_id)
        if info.finished:
            return info
        if time.monotonic() >= deadline:
            raise GantryError(
                f"job {job_id} still {info.state} (reason {info.reason}) after {timeout:.0f} s"
            )
        time.sleep(0.3)
