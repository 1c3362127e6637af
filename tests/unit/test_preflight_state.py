"""The preflight state dir: every record is checked field by field (a bad one is set aside
with a warning and the node has no history), its owner writes it and everyone else only
reads it, and a directory others could have written is not used at all."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from launcher.preflight.context import Baseline
from launcher.preflight.gate import gate_actions
from launcher.preflight.slurm_nodes import Scontrol
from launcher.preflight.state import (
    NodeHistory,
    all_histories,
    load_baseline,
    load_history,
    policy_lock,
    save_baseline,
    save_history,
    state_dir,
)
from launcher.preflight.state_access import StateAccess, state_access
from launcher.preflight.verdict import NodeVerdict
from launcher.site_config import load_site
from tests.unit.preflight_helpers import FAULTS, HEALTHY, gpu_env

GOOD: dict[str, Any] = {
    "node": "n9", "clean_passes": 2, "drained_by_gantry": True,
    "drain_reason": "gantry:gpu.ecc:dbe", "drained_at": 1_700_000_000.5,
    "last_status": "FAIL", "last_run": 1_700_000_100,
}
SITE = """\
name: t
nodes: {names: "n[1-2]", cpus: 1, real_memory_mb: 1, gpus_per_node: 2, gpu_model: NVIDIA H200}
preflight: {state_dir: STATE}
"""


def gantry(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "launcher", *args], capture_output=True,
                          text=True, env=env, check=False, timeout=120)


def site_file(tmp_path: Path, state: Path) -> Path:
    path = tmp_path / "site.yaml"
    path.write_text(SITE.replace("STATE", str(state)))
    return path


def fake_scontrol(tmp_path: Path) -> tuple[Path, Path]:
    """An scontrol that knows no node and logs its arguments (the tool-path override)."""
    log = tmp_path / "scontrol.log"
    fake = tmp_path / "scontrol"
    fake.write_text(f"#!/bin/sh\necho \"$@\" >> {log}\n")
    fake.chmod(0o755)
    return fake, log


def verdict(node: str) -> NodeVerdict:
    return NodeVerdict(node=node, level="quick", status="PASS",
                       started_at="2026-11-30T12:00:00+00:00", duration_s=0.1,
                       gantry_version="0", gpu_source="none", checks=[])


def set_aside_files(folder: Path, name: str) -> list[Path]:
    return sorted(folder.glob(f"{name}.bad-*"))


# ------------------------------------------------------------------ bad history records --

@pytest.mark.parametrize(("preflight", "expected"), [
    ("", "run/preflight"),  # <slurm.run_dir>/preflight, as the embedded cluster's run dir
    ("preflight: {state_dir: state}\n", "state"),
])
def test_relative_site_paths_resolve_against_the_site_file_from_any_directory(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, preflight: str, expected: str) -> None:
    monkeypatch.delenv("GANTRY_STATE_DIR", raising=False)
    monkeypatch.delenv("GANTRY_RUN_DIR", raising=False)
    sites = tmp_path / "sites"
    sites.mkdir()
    sites = sites.resolve()
    (sites / "site.yaml").write_text(
        "name: t\nslurm: {run_dir: run}\nnodes: {names: n1, cpus: 1, real_memory_mb: 1}\n"
        + preflight)
    seen = []
    for cwd in ("a", "b"):
        (tmp_path / cwd).mkdir()
        monkeypatch.chdir(tmp_path / cwd)
        site = load_site(Path("..") / "sites" / "site.yaml")
        seen.append((state_dir(site), site.run_dir()))
    assert seen[0] == seen[1] == (sites / expected, sites / "run")


def test_a_bad_history_record_no_longer_fails_every_gate(tmp_path: Path) -> None:
    state = tmp_path / "state"
    (state / "history").mkdir(parents=True)
    bad = state / "history" / "n9.json"
    bad.write_text(json.dumps({**GOOD, "drained_at": "yesterday"}))
    reports = tmp_path / "reports.txt"
    reports.write_text(f"0: {json.dumps(verdict('n1').to_dict())}\n")
    fake, _ = fake_scontrol(tmp_path)
    result = gantry(["gate", "--nodes", "n1", "--site", str(site_file(tmp_path, state)),
                     "--reports", str(reports), "--no-requeue"],
                    {**gpu_env(HEALTHY), "GANTRY_SCONTROL": str(fake)})
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr
    [aside] = set_aside_files(state / "history", "n9.json")
    warnings = [ln for ln in result.stderr.splitlines() if ln.startswith("warning: ")]
    assert warnings == [f"warning: {bad}: drained_at: 'yesterday' is not allowed (expected "
                        "epoch seconds, a finite number >= 0, or null); set aside as "
                        f"{aside.name}; n9 is treated as having no history"]
    assert not bad.exists()
    assert json.loads(aside.read_text())["drained_at"] == "yesterday"  # kept for the operator
    assert json.loads((state / "history" / "n1.json").read_text())["clean_passes"] == 1


BAD_RECORDS: list[tuple[object, str]] = [
    ({**GOOD, "drained_at": "yesterday"}, "drained_at: 'yesterday' is not allowed"),
    ({**GOOD, "drained_at": -5}, "drained_at: -5 is not allowed"),
    ({**GOOD, "drained_at": 10**400}, "drained_at: 1000"),
    ({**GOOD, "last_run": True}, "last_run: True is not allowed"),
    ({**GOOD, "clean_passes": "3"}, "clean_passes: '3' is not allowed (expected an integer"),
    ({**GOOD, "clean_passes": 2.5}, "clean_passes: 2.5 is not allowed"),
    ({**GOOD, "clean_passes": -1}, "clean_passes: -1 is not allowed"),
    ({**GOOD, "clean_passes": True}, "clean_passes: True is not allowed"),
    ({**GOOD, "drained_by_gantry": "yes"}, "drained_by_gantry: 'yes' is not allowed"),
    ({**GOOD, "drain_reason": ["x"]}, "drain_reason: ['x'] is not allowed"),
    ({**GOOD, "last_status": "OK"}, "last_status: 'OK' is not allowed (expected one of PASS"),
    ({**GOOD, "node": "n1"}, "node: 'n1' is not allowed (the file is node 'n9''s)"),
    ({k: v for k, v in GOOD.items() if k != "last_run"}, "has no last_run"),
    ([GOOD], "is [{"),
    ("null", "is null, not a JSON object"),
]


@pytest.mark.parametrize(("record", "problem"), BAD_RECORDS)
def test_each_field_of_a_history_record_is_checked(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], record: object, problem: str
) -> None:
    folder = tmp_path / "history"
    folder.mkdir()
    (folder / "n9.json").write_text(record if isinstance(record, str) else json.dumps(record))
    assert load_history(tmp_path, "n9") == NodeHistory("n9")
    [aside] = set_aside_files(folder, "n9.json")
    err = capsys.readouterr().err
    assert err.startswith(f"warning: {folder / 'n9.json'}: {problem}"), err
    assert err.endswith(f"set aside as {aside.name}; n9 is treated as having no history\n")
    assert err.count("\n") == 1


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ('{"node": "n9", "drained_at": NaN}', "is not a JSON record (NaN is not a finite number"),
        ('{"node": "n9", "last_run": Infinity}', "is not a JSON record (Infinity is not a"),
        ("{not json", "is not a JSON record (Expecting property name"),
        ("[" * 100_000 + "]" * 100_000, "is nested too deeply"),
        ('{"clean_passes": ' + "9" * 5000 + "}", "is not a JSON record (Exceeds the limit"),
        ('{"node": "n9"' + " " * (2 * 1024 * 1024) + "}", "is over 1048576 bytes"),
        (b"\xff\xfe".decode("latin-1"), "is not a JSON record ("),
    ],
)
def test_a_history_file_that_is_no_json_record_is_set_aside(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str, problem: str
) -> None:
    folder = tmp_path / "history"
    folder.mkdir()
    (folder / "n9.json").write_text(text, encoding="latin-1")
    assert load_history(tmp_path, "n9") == NodeHistory("n9")
    assert len(set_aside_files(folder, "n9.json")) == 1
    assert capsys.readouterr().err.startswith(f"warning: {folder / 'n9.json'}: {problem}")


def test_a_fifo_or_a_link_as_history_is_set_aside_without_blocking(tmp_path: Path) -> None:
    state = tmp_path / "state"
    (state / "history").mkdir(parents=True)
    os.mkfifo(state / "history" / "n9.json")
    (state / "history" / "n8.json").symlink_to("/etc/passwd")
    code = ("from pathlib import Path; from launcher.preflight.state import all_histories; "
            f"print(len(all_histories(Path({str(state)!r}))))")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            check=False, timeout=60)  # before: blocked forever on the FIFO
    assert result.returncode == 0 and result.stdout == "0\n", result.stderr
    assert "n9.json: is not a regular file; set aside" in result.stderr
    assert "n8.json: cannot be read (" in result.stderr
    assert len(list((state / "history").glob("*.bad-*"))) == 2


def test_all_histories_keeps_the_good_records_and_their_node_names(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    save_history(tmp_path, NodeHistory("gpu-a01", clean_passes=1, drained_at=5.0))
    save_history(tmp_path, NodeHistory("n[7]", drained_at=7.0))  # the file is n_7_.json
    (tmp_path / "history" / "n9.json").write_text(json.dumps({**GOOD, "drained_at": "x"}))
    (tmp_path / "history" / "n3.json").write_text(json.dumps({**GOOD, "node": "n4"}))
    got = all_histories(tmp_path)
    assert [(h.node, h.drained_at) for h in got] == [("gpu-a01", 5.0), ("n[7]", 7.0)]
    err = capsys.readouterr().err
    assert "n3.json: node: 'n4' is not allowed (the file is named after node 'n3')" in err
    assert "n9.json: drained_at: 'x' is not allowed" in err


def test_a_good_history_record_loads_as_it_was_written(tmp_path: Path) -> None:
    history = NodeHistory(**GOOD)
    save_history(tmp_path, history)
    assert load_history(tmp_path, "n9") == NodeHistory(**{**GOOD, "last_run": 1_700_000_100.0})
    assert load_history(tmp_path, "n1") == NodeHistory("n1")


# ------------------------------------------------------------------- counter baselines --

@pytest.mark.parametrize(
    ("record", "problem"),
    [
        ({"boot_id": "b", "counters": {"ib/mlx5_0/1/link_downed": "3"}},
         "counters.ib/mlx5_0/1/link_downed"),
        ({"boot_id": "b", "counters": {"x": -1}}, "x: -1 is not allowed"),
        ({"boot_id": "b", "counters": {"x": True}}, "x: True is not allowed"),
        ({"boot_id": "b", "counters": {"x": 2**64}}, "is not allowed (expected an integer"),
        ({"boot_id": "b", "counters": [1]}, "counters: [1] is not allowed"),
        ({"boot_id": 7, "counters": {}}, "boot_id: 7 is not allowed"),
        ({"boot_id": "b"}, "has no counters"),
        ({"node": "n2", "boot_id": "b", "counters": {}}, "node: 'n2' is not allowed"),
    ],
)
def test_a_bad_counter_baseline_is_set_aside(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], record: dict[str, Any], problem: str
) -> None:
    folder = tmp_path / "counters"
    folder.mkdir()
    (folder / "n1.json").write_text(json.dumps(record))
    assert load_baseline(tmp_path, "n1") is None
    assert len(set_aside_files(folder, "n1.json")) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"warning: {folder / 'n1.json'}: "), err
    assert problem.split(": ")[-1].split(".")[-1] in err, err
    assert err.endswith("no counter baseline for n1 (counter growth is not checked this run)\n")


def test_counter_baselines_load_as_written_and_in_the_earlier_format(tmp_path: Path) -> None:
    baseline = Baseline(boot_id="b1", counters={"nvlink/GPU-1/0/replay": 4})
    save_baseline(tmp_path, "n1", baseline)
    assert json.loads((tmp_path / "counters" / "n1.json").read_text())["node"] == "n1"
    assert load_baseline(tmp_path, "n1") == baseline
    (tmp_path / "counters" / "n2.json").write_text('{"boot_id": null, "counters": {"a": 1}}')
    assert load_baseline(tmp_path, "n2") == Baseline(boot_id=None, counters={"a": 1})


def test_a_reader_leaves_a_bad_baseline_in_place(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "counters").mkdir()
    (tmp_path / "counters" / "n1.json").write_text('{"boot_id": "b", "counters": {"x": "1"}}')
    assert load_baseline(tmp_path, "n1", set_aside_bad=False) is None
    assert (tmp_path / "counters" / "n1.json").exists()
    assert "left in place (this process only reads the state dir)" in capsys.readouterr().err


# ------------------------------------------------------------ who writes, who reads --

def test_the_owner_of_the_state_dir_writes_it_and_others_read_it(tmp_path: Path) -> None:
    state = tmp_path / "state"
    owner = os.stat(tmp_path).st_uid
    other = owner + 1000
    assert state_access(state, owner) == StateAccess(state, read=True, write=True)  # creates it
    missing = state_access(state, other)
    assert missing.read and not missing.write and "does not exist" in missing.problem
    state.mkdir()
    assert state_access(state, owner) == StateAccess(state, read=True, write=True)
    reader = state_access(state, other)
    assert (reader.read, reader.write) == (True, False)
    assert reader.problem == f"{state} belongs to uid {owner}, which writes it"


@pytest.mark.parametrize("where", ["state", "state/history", "state/counters", "above"])
def test_a_state_dir_others_may_write_is_not_used(tmp_path: Path, where: str) -> None:
    above = tmp_path / "above"
    state = above / "state"
    for sub in ("history", "counters"):
        (state / sub).mkdir(parents=True)
    target = above if where == "above" else above / where
    target.chmod(0o777)
    for uid in (os.stat(tmp_path).st_uid, os.stat(tmp_path).st_uid + 1000):
        access = state_access(state, uid)
        assert (access.read, access.write) == (False, False)
        assert access.problem == f"{target} is writable by group or others (mode 0777)"
    target.chmod(0o1777)  # sticky: fine above the state dir, not for it or its subdirs
    assert state_access(state, os.stat(tmp_path).st_uid).write == (where == "above")


def test_a_state_dir_that_cannot_be_looked_at_is_not_used(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("")
    access = state_access(tmp_path / "file" / "state")
    assert (access.read, access.write) == (False, False)
    assert access.problem.endswith("cannot be examined (Not a directory)"), access.problem


def test_the_state_dir_is_made_for_jobs_to_read_whatever_the_umask(tmp_path: Path) -> None:
    previous = os.umask(0o077)
    try:
        save_history(tmp_path / "state", NodeHistory("n1"))
        save_baseline(tmp_path / "state", "n1", Baseline(boot_id=None))
        with policy_lock(tmp_path / "state"):
            pass
    finally:
        os.umask(previous)
    modes = {str(p.relative_to(tmp_path)): stat.S_IMODE(p.stat().st_mode)
             for p in sorted((tmp_path / "state").rglob("*"))}
    assert stat.S_IMODE((tmp_path / "state").stat().st_mode) == 0o755
    assert modes == {"state/counters": 0o755, "state/counters/n1.json": 0o644,
                     "state/history": 0o755, "state/history/n1.json": 0o644,
                     "state/policy.lock": 0o644}


def test_a_gate_that_only_reads_the_state_dir_drains_nothing_and_writes_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake, log = fake_scontrol(tmp_path)
    monkeypatch.setenv("GANTRY_SCONTROL", str(fake))
    state = tmp_path / "state"
    state.mkdir()
    site = load_site(site_file(tmp_path, state))
    reader = StateAccess(state, read=True, write=False, problem=f"{state} belongs to uid 0")
    actions = gate_actions(site, {"n1": "gantry:gpu.ecc:dbe", "n2": None}, Scontrol(), reader)
    assert [(a.node, a.kind, a.reason) for a in actions] == [("n1", "keep", "gantry:gpu.ecc:dbe")]
    assert actions[0].note == (f"excluded, not drained by the gate ({state} belongs to uid 0: "
                               "drains are left to the node's own Prolog/Epilog/"
                               "HealthCheckProgram)")
    assert not log.exists() and list(state.iterdir()) == []
    writer = StateAccess(state, read=True, write=True)
    actions = gate_actions(site, {"n1": "gantry:gpu.ecc:dbe", "n2": None}, Scontrol(), writer)
    assert [a.node for a in actions] == ["n1", "n2"]  # the policy ran, asking Slurm first
    assert "show node" in log.read_text()
    assert sorted(p.name for p in (state / "history").iterdir()) == ["n1.json", "n2.json"]


def test_preflight_drain_as_a_reader_and_in_an_open_state_dir_changes_nothing(
    tmp_path: Path
) -> None:
    """A node's checks still run and say what they found; the drain policy runs only as the
    state dir's writer, and counter baselines are neither read nor written in a directory
    others may write."""
    fake, log = fake_scontrol(tmp_path)
    state = tmp_path / "state"
    (state / "counters").mkdir(parents=True)
    (state / "counters").chmod(0o777)
    env = {**gpu_env(FAULTS / "remap-pending"), "GANTRY_SCONTROL": str(fake),
           "SLURMD_NODENAME": "n1"}
    result = gantry(["preflight", "--drain", "--quiet", "--site",
                     str(site_file(tmp_path, state))], env)
    assert result.returncode == 1  # the node fails
    problem = f"{state / 'counters'} is writable by group or others (mode 0777)"
    assert result.stderr.splitlines() == [
        f"warning: preflight state dir not used: {problem} (counter growth is not checked; "
        "see docs/preflight.md)",
        f"warning: gantry preflight: n1: drain policy not applied: {problem} "
        "(see docs/preflight.md)",
    ]
    assert not log.exists()
    assert list((state / "counters").iterdir()) == [] and not (state / "history").exists()
