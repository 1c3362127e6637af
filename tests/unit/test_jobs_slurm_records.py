"""Parsing of Slurm JSON: recorded 22.05 output from this host and 24.11-shaped samples."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from launcher.slurm.records import (
    SlurmParseError,
    exit_status,
    meta_version,
    node_from_json,
    number,
    parse_nodes,
    parse_sacct,
    parse_squeue,
    parse_version,
    states,
)

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "slurm"


def test_squeue_2205_recorded() -> None:
    text = (FIXTURES / "22.05" / "squeue.json").read_text()
    jobs = {job.job_id: job for job in parse_squeue(text)}
    assert meta_version(text) == (22, 5, 8)
    assert set(jobs) == {"1", "2", "3", "4", "5", "6", "7"}
    cancelled, failed, running = jobs["1"], jobs["5"], jobs["6"]
    assert (cancelled.state, cancelled.signal, cancelled.exit_code) == ("CANCELLED", 15, None)
    assert cancelled.terminal and cancelled.nodes == "n[1-2]"
    assert (failed.state, failed.exit_code, failed.reason) == ("FAILED", 3, "NonZeroExitCode")
    assert running.state == "RUNNING" and not running.terminal
    assert running.time_limit_min == 10 and running.exit_code is None
    assert running.stdout == "/tmp/jobs-slurm/rec/o-%j.log"
    assert jobs["4"].reason == "JobHeldUser" and jobs["4"].start_time is None
    assert jobs["7"].dependency == "afterok:4(unfulfilled)"
    assert jobs["2"].time_limit_min is None  # UNLIMITED is null in 22.05


def test_squeue_2411_shapes() -> None:
    text = (FIXTURES / "24.11" / "squeue.json").read_text()
    jobs = {job.job_id: job for job in parse_squeue(text)}
    assert meta_version(text) == (24, 11, 1)
    assert set(jobs) == {"101", "102", "103", "104", "110_3"}
    assert jobs["101"].state == "RUNNING" and jobs["101"].time_limit_min == 10
    assert jobs["101"].node_count == 4 and jobs["101"].exit_code is None
    requeued = jobs["102"]
    assert requeued.state == "PENDING" and requeued.flags == ("REQUEUED",)
    assert requeued.restarts == 2 and requeued.time_limit_min is None
    assert requeued.start_time is None and not requeued.terminal
    assert (jobs["103"].state, jobs["103"].exit_code) == ("FAILED", 65)
    assert (jobs["104"].exit_code, jobs["104"].signal) == (None, 15)
    assert jobs["110_3"].state == "COMPLETED" and jobs["110_3"].exit_code == 0


def test_nodes_2205_sinfo_recorded() -> None:
    nodes = {n.name: n for n in parse_nodes((FIXTURES / "22.05" / "sinfo.json").read_text())}
    assert set(nodes) == {"n1", "n2", "n3", "n4"}
    assert nodes["n4"].drained and not nodes["n4"].usable
    assert nodes["n4"].reason == "gantry: test drain" and nodes["n4"].reason_user == "root"
    assert nodes["n1"].state == "MIXED" and nodes["n1"].usable
    assert nodes["n2"].state == "IDLE" and not nodes["n2"].drained


def test_nodes_2411_scontrol() -> None:
    nodes = {n.name: n for n in parse_nodes(
        (FIXTURES / "24.11" / "scontrol_nodes.json").read_text())}
    assert nodes["n3"].state == "IDLE" and nodes["n3"].flags == ("DRAIN",)
    assert nodes["n3"].drained and not nodes["n3"].usable
    assert nodes["n4"].state == "DOWN" and not nodes["n4"].usable
    assert nodes["n1"].usable and nodes["n2"].usable


def test_sacct_both_shapes() -> None:
    new = parse_sacct((FIXTURES / "24.11" / "sacct.json").read_text())[0]
    assert (new.job_id, new.state, new.signal, new.time_limit_min) == ("90", "TIMEOUT", 15, 10)
    assert new.restarts == 1 and new.terminal
    old_doc = {"meta": {"Slurm": {"version": {"major": 22, "minor": 5, "micro": 8}}},
               "errors": [], "jobs": [{
                   "job_id": 7, "name": "x", "nodes": "n1", "partition": "debug",
                   "state": {"current": "COMPLETED", "reason": "None"},
                   "time": {"start": 100, "end": 160, "submission": 99, "limit": 5},
                   "exit_code": {"status": "SUCCESS", "return_code": 0}}]}
    old = parse_sacct(json.dumps(old_doc))[0]
    assert (old.state, old.exit_code, old.start_time, old.time_limit_min) == (
        "COMPLETED", 0, 100, 5)


@pytest.mark.parametrize(("raw", "expected"), [
    (None, None), (7, 7), ({"set": True, "infinite": False, "number": 9}, 9),
    ({"set": False, "infinite": False, "number": 9}, None),
    ({"set": True, "infinite": True, "number": 0}, None), ("12", 12), (True, None),
])
def test_number(raw: object, expected: int | None) -> None:
    assert number(raw) == expected


def test_states_and_exit_status() -> None:
    assert states("RUNNING") == ("RUNNING", ())
    assert states(["PENDING", "REQUEUED"]) == ("PENDING", ("REQUEUED",))
    assert states("idle+drain") == ("IDLE", ("DRAIN",))
    assert states(None) == ("UNKNOWN", ())
    assert exit_status(768) == (3, None)
    assert exit_status(9) == (None, 9)
    assert exit_status(0) == (0, None)


def test_errors_in_json_are_reported() -> None:
    with pytest.raises(SlurmParseError, match="Invalid job id"):
        parse_squeue(json.dumps({"errors": [{"description": "Invalid job id specified"}],
                                 "jobs": []}))
    with pytest.raises(SlurmParseError, match="not JSON"):
        parse_squeue("slurm_load_jobs error: Socket timed out")


def test_parse_version() -> None:
    assert parse_version("slurm 22.05.8\n") == (22, 5, 8)
    assert parse_version("slurm-wlm 24.11.1") == (24, 11, 1)
    with pytest.raises(SlurmParseError):
        parse_version("garbage")


@pytest.mark.parametrize(("state", "usable"), [
    (["IDLE"], True), (["IDLE", "REBOOT_ISSUED"], False), (["IDLE", "INVALID_REG"], False),
    (["IDLE", "RESERVED"], False), (["MIXED", "COMPLETING"], True), (["IDLE", "CLOUD"], True),
])
def test_node_flags_that_take_no_jobs(state: list[str], usable: bool) -> None:
    """A 23.02+ node record (state as a list of base and flags): what placement may use."""
    node = node_from_json({"name": "n1", "state": state})
    assert node.usable is usable
