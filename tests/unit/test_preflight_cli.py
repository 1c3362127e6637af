"""`gantry preflight` as users run it: exit codes, JSON verdict, one-line input errors."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from launcher.preflight.result import CheckResult
from launcher.preflight.verdict import NodeVerdict
from tests.unit.preflight_helpers import FAULTS, HEALTHY, gpu_env

SITE = """\
name: fake-h200
nodes: {names: "n[1-2]", cpus: 1, real_memory_mb: 1, gpus_per_node: 2, gpu_model: NVIDIA H200}
preflight: {state_dir: STATE}
"""


def gantry(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "launcher", *args],
        capture_output=True,
        text=True,
        env=env,
        check=False,
        timeout=300,
    )


def site(tmp_path: Path, text: str = SITE) -> Path:
    path = tmp_path / "site.yaml"
    path.write_text(text.replace("STATE", str(tmp_path / "state")))
    return path


def test_healthy_node_exits_0_with_versioned_json(tmp_path: Path) -> None:
    env = gpu_env(HEALTHY, SLURMD_NODENAME="n1")
    result = gantry(["preflight", "--json", "--site", str(site(tmp_path))], env)
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    assert data["schema"] == "gantry.preflight.verdict" and data["version"] == 1
    assert data["node"] == "n1" and data["status"] == "PASS"
    assert {"id", "status", "observed", "expected", "evidence", "action", "duration_s"} <= set(
        data["checks"][0]
    )


def test_failing_node_exits_1_and_names_the_reason(tmp_path: Path) -> None:
    env = gpu_env(FAULTS / "remap-pending")
    result = gantry(["preflight", "--site", str(site(tmp_path))], env)
    assert result.returncode == 1
    assert "FAIL gpu.row_remap: GPU1: remap pending=Yes" in result.stdout
    assert "gantry:gpu.row_remap:gpu1-pending" in result.stdout


def test_unknown_threshold_is_one_line_error(tmp_path: Path) -> None:
    bad = SITE + "  thresholds: {gpu_temp_max: 3}\n"
    bad = bad.replace(
        "preflight: {state_dir: STATE}\n  thresholds: {gpu_temp_max: 3}\n",
        "preflight:\n  state_dir: STATE\n  thresholds: {gpu_temp_max: 3}\n",
    )
    result = gantry(["preflight", "--site", str(site(tmp_path, bad))], gpu_env(HEALTHY))
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "preflight.thresholds.gpu_temp_max: unknown threshold" in lines[0]
    assert "gpu_temp_fail_c" in lines[0]


def test_bad_level_flag_is_one_line_error(tmp_path: Path) -> None:
    result = gantry(["preflight", "--level", "extreme"], gpu_env(HEALTHY))
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert result.stderr.startswith("error: ")


def test_gate_rejects_bad_need(tmp_path: Path) -> None:
    result = gantry(
        ["gate", "--nodes", "n[1-2]", "--need", "5", "--site", str(site(tmp_path))],
        gpu_env(HEALTHY),
    )
    assert result.returncode == 2
    assert "--need 5 is not allowed (expected 1..2 for n[1-2])" in result.stderr


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--nodes-out", "/nonexistent/dir/nodes"], "--nodes-out: /nonexistent/dir is not a "
         "directory"),
        (["--nodelist-out", "{tmp}"], "--nodelist-out: {tmp} is a directory (expected a file "
         "name)"),
        (["--reports", "{tmp}/fifo"], "{tmp}/fifo: not a regular file (expected the preflight "
         "step's output)"),
    ],
)
def test_gate_refuses_its_files_before_draining_anything(
    tmp_path: Path, flags: list[str], message: str
) -> None:
    os.mkfifo(tmp_path / "fifo")
    scontrol_log = tmp_path / "scontrol.log"
    fake = tmp_path / "scontrol"
    fake.write_text(f"#!/bin/sh\necho \"$@\" >> {scontrol_log}\n")
    fake.chmod(0o755)
    result = gantry(
        ["gate", "--nodes", "n[1-2]", "--site", str(site(tmp_path)), "--job-id", "7",
         *[f.format(tmp=tmp_path) for f in flags]],
        {**gpu_env(HEALTHY), "PATH": f"{tmp_path}:{os.environ['PATH']}"},
    )
    assert result.returncode == 2, result.stderr
    assert result.stderr.splitlines() == [f"error: {message.format(tmp=tmp_path)}"]
    assert not scontrol_log.exists()


def test_gate_refuses_a_job_id_that_is_no_job_id(tmp_path: Path) -> None:
    result = gantry(["gate", "--nodes", "n[1-2]", "--site", str(site(tmp_path)),
                     "--job-id=--help"], gpu_env(HEALTHY))
    assert result.returncode == 2
    assert result.stderr == ("error: gate: --job-id '--help' is not allowed (expected a Slurm "
                             "job id, e.g. 1234 or 1234_7)\n")


def test_gate_reports_with_labels_int_cannot_read(tmp_path: Path) -> None:
    """--reports lines whose label is "²" (str.isdigit() true, int() refuses it) or 5,000
    digits (past int()'s limit) raised ValueError out of the gate: they are no srun label,
    so they are not a task's output; the labelled task's verdict is read as ever."""
    passed = NodeVerdict(node="n1", level="quick", status="PASS",
                         started_at="2026-11-30T12:00:00+00:00", duration_s=0.1,
                         gantry_version="0", gpu_source="none",
                         checks=[CheckResult("host.cpus", "PASS", "2", ">= 2")])
    reports = tmp_path / "reports.txt"
    reports.write_text(f"0: {json.dumps(passed.to_dict())}\n"
                       '\u00b2: {"node": "n2"}\n' + "9" * 5000 + ": x\n", encoding="utf-8")
    fake = tmp_path / "scontrol"
    fake.write_text("#!/bin/sh\nexit 0\n")
    fake.chmod(0o755)
    result = gantry(["gate", "--nodes", "n1", "--site", str(site(tmp_path)), "--reports",
                     str(reports), "--no-requeue"],
                    {**gpu_env(HEALTHY), "GANTRY_SCONTROL": str(fake)})
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr
    assert result.stdout == "n1\n"
    assert "gantry gate: go: 1 healthy nodes n1" in result.stderr


def test_preflight_gate_is_an_alias_of_gate() -> None:
    """One command, two names: the same handler, the same options, help naming the alias."""
    import argparse

    from launcher.cli import build_parser
    from launcher.commands import gate

    def subparsers_of(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
        action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
        return dict(action.choices)

    top = subparsers_of(build_parser())
    main, alias = top["gate"], subparsers_of(top["preflight"])["gate"]

    def options(parser: argparse.ArgumentParser) -> list[tuple[str, ...]]:
        return [tuple(a.option_strings) for a in parser._actions]

    assert options(main) == options(alias) and "--placement" in main.format_help()
    argv = ["--nodes", "n1", "--need", "1", "--placement", "p.json"]
    assert vars(main.parse_args(argv)) == vars(alias.parse_args(argv))
    assert main.get_default("func") is alias.get_default("func") is gate.run
    action = next(a for a in top["preflight"]._actions
                  if isinstance(a, argparse._SubParsersAction))
    assert [c.help for c in action._choices_actions] == ["alias of `gantry gate`",
                                                         "alias of `gantry fabric`"]
