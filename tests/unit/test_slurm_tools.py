"""The one tool rule and the one Slurm runner under it.

Tools are stand-ins put where users point gantry (GANTRY_<TOOL>, GANTRY_SLURM_BIN_DIR):
the same doors the rule documents.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from launcher import process_runner
from launcher.errors import GantryError
from launcher.slurm import CommandRunner, SlurmCommandError, tools
from launcher.slurm.tools import require_tool, tool_env_var, tool_path


def make_tool(folder: Path, name: str, body: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


def test_the_rule_override_then_bin_dir_then_path(tmp_path: Path) -> None:
    own = make_tool(tmp_path / "own", "scontrol", "exit 0\n")
    bin_dir = tmp_path / "slurm-bin"
    env = {"GANTRY_SLURM_BIN_DIR": str(bin_dir)}
    assert tool_path("scontrol", {**env, "GANTRY_SCONTROL": str(own)}) == str(own)
    assert tool_path("scontrol", env) == str(bin_dir / "scontrol")  # taken as it is
    assert tool_path("srun", env) == str(bin_dir / "srun")
    assert tool_path("sh", env) not in (None, str(bin_dir / "sh"))  # not Slurm's: PATH
    assert tool_path("munged", env) != str(bin_dir / "munged")
    assert tool_path("no-such-tool-here", {}) is None
    assert tool_env_var("nvidia-smi") == "GANTRY_NVIDIA_SMI"
    assert tool_env_var("slurmctld") == "GANTRY_SLURMCTLD"


def test_after_path_the_sbin_dirs_then_a_message_saying_how_to_point_gantry(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    sbin = tmp_path / "sbin"
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    monkeypatch.setattr(tools, "SEARCH_DIRS", (str(sbin),))
    monkeypatch.delenv("GANTRY_SQUEUE", raising=False)
    monkeypatch.delenv("GANTRY_SLURM_BIN_DIR", raising=False)
    with pytest.raises(GantryError, match=r"squeue not found on PATH or .*sbin \(install "
                       "slurm-wlm and munge, or set GANTRY_SQUEUE, or GANTRY_SLURM_BIN_DIR"):
        require_tool("squeue")
    assert tool_path("nvidia-smi") is None
    daemon = make_tool(sbin, "slurmd", "exit 0\n")
    make_tool(sbin, "nvidia-smi", "exit 0\n")
    assert require_tool("slurmd") == str(daemon)
    assert tool_path("nvidia-smi") is None  # not Slurm's nor munge's: PATH only


def test_the_runner_kills_what_a_hung_tool_left_running(tmp_path: Path) -> None:
    """A hung sinfo whose child closed its output and runs on: the whole process group is
    killed at the timeout, the child with it."""
    child = tmp_path / "child.pid"
    make_tool(tmp_path / "bin", "sinfo",
              f"(exec >/dev/null 2>&1; sleep 600) &\necho $! > {child}\nsleep 600\n")
    runner = CommandRunner(env={**os.environ, "GANTRY_SLURM_BIN_DIR": str(tmp_path / "bin")},
                           timeout_s=3.0, retries=0)
    with pytest.raises(SlurmCommandError, match=r"timed out after 3s \(1 attempts\)"):
        runner.run(["sinfo", "--json"])
    assert killed(int(child.read_text()))


def killed(pid: int) -> bool:
    """True when ``pid`` is gone, a zombie, or has SIGKILL pending (it dies on its next
    step)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except FileNotFoundError:
        return True
    fields = dict(line.split(":\t", 1) for line in status.splitlines() if ":\t" in line)
    if fields.get("State", "").startswith(("Z", "X")):
        return True
    sigkill = 1 << (9 - 1)
    return any(int(fields.get(key, "0"), 16) & sigkill for key in ("SigPnd", "ShdPnd"))


def test_the_runner_caps_what_a_tool_prints(tmp_path: Path,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(process_runner, "MAX_TOOL_OUTPUT", 1 << 20)
    make_tool(tmp_path / "bin", "squeue", "exec yes gantry\n")
    runner = CommandRunner(env={**os.environ, "GANTRY_SLURM_BIN_DIR": str(tmp_path / "bin")},
                           retries=0)
    with pytest.raises(SlurmCommandError, match=r"printed more than .* bytes"):
        runner.run(["squeue", "--json"])
