"""The Slurm command runner: retries on transient controller errors, timeouts, one-line errors.

Controller faults are injected with tool stand-ins in $GANTRY_SLURM_BIN_DIR (the override
users also have); the stand-ins replay the squeue JSON recorded from the real 22.05 here.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from launcher.slurm import CliSlurmClient, CommandRunner, SlurmCommandError

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "slurm"


def make_tool(bin_dir: Path, name: str, body: str) -> None:
    path = bin_dir / name
    path.write_text("#!/bin/bash\n" + body)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)


def flaky_squeue(tmp_path: Path, failures: int, message: str) -> dict[str, str]:
    """A squeue that fails `failures` times with `message`, then prints the recorded JSON."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    count = tmp_path / "count"
    make_tool(bin_dir, "squeue", f"""
echo "$@" >> {tmp_path}/calls
n=$(cat {count} 2>/dev/null || echo 0); echo $((n + 1)) > {count}
if [ "$n" -lt {failures} ]; then echo "squeue: error: {message}" >&2; exit 1; fi
cat {FIXTURES}/22.05/squeue.json
""")
    return {**os.environ, "GANTRY_SLURM_BIN_DIR": str(bin_dir)}


def test_transient_errors_are_retried_with_backoff(tmp_path: Path) -> None:
    waits: list[float] = []
    runner = CommandRunner(env=flaky_squeue(tmp_path, 3, "Socket timed out on send/recv"),
                           backoff_s=0.25, max_backoff_s=0.6, sleep=waits.append)
    client = CliSlurmClient(runner=runner)
    jobs = client.job_states(["5", "6", "999"])
    assert set(jobs) == {"5", "6"}
    assert waits == [0.25, 0.5, 0.6]
    assert runner.log[-1].attempts == 4
    # one batched squeue for three ids (plus the retries), no per-job calls
    assert (tmp_path / "calls").read_text().count("--json") == 4


def test_transient_errors_give_up_after_retries(tmp_path: Path) -> None:
    runner = CommandRunner(env=flaky_squeue(tmp_path, 10, "Unable to contact slurm controller "
                                                          "(connect failure)"),
                           retries=2, sleep=lambda _s: None)
    with pytest.raises(SlurmCommandError, match="exit 1: squeue: error: Unable to contact"):
        runner.run(["squeue", "--json"])
    assert (tmp_path / "count").read_text().strip() == "3"


def test_other_errors_are_not_retried(tmp_path: Path) -> None:
    runner = CommandRunner(env=flaky_squeue(tmp_path, 10, "Invalid job id specified"),
                           sleep=lambda _s: None)
    with pytest.raises(SlurmCommandError, match="Invalid job id"):
        runner.run(["squeue", "--json"])
    assert (tmp_path / "count").read_text().strip() == "1"
    assert runner.run(["squeue"], check=False).returncode == 1


def test_timeout_and_missing_tool(tmp_path: Path) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    make_tool(bin_dir, "sinfo", "sleep 5\n")
    env = {**os.environ, "GANTRY_SLURM_BIN_DIR": str(bin_dir)}
    runner = CommandRunner(env=env, timeout_s=0.3, retries=1, sleep=lambda _s: None)
    with pytest.raises(SlurmCommandError, match=r"timed out after 0.3s \(2 attempts\)"):
        runner.run(["sinfo", "--json"])
    with pytest.raises(SlurmCommandError, match="not found"):
        runner.run(["scontrol", "show", "config"])


def test_runner_refuses_shell_strings() -> None:
    with pytest.raises(TypeError):
        CommandRunner().run("squeue --json")  # type: ignore[arg-type]
