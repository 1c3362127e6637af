"""Parsing of Slurm JSON: recorded 22.05 output from this host and 24.11-shaped samples."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from launcher.slurm.records import (
    NodeInfo,
    SlurmParseError,
    exit_status,
    meta_version,
    node_from_json,
    number,
    parse_nodes,
    parse_sacct,
    parse_squeue,
    parse_version,
    sinfo_state,
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


# Shapes Slurm's JSON never has (a damaged or foreign tool, another version): each is one
# SlurmParseError naming the command and the field, never AttributeError/TypeError/KeyError.
BAD_SHAPES = [
    (parse_nodes, {"nodes": [1]}, "node list: nodes[0]: expected an object, got a number"),
    (parse_nodes, {"nodes": None}, "node list: nodes: expected a list, got null"),
    (parse_nodes, {"nodes": "n1"}, "node list: nodes: expected a list, got a string"),
    (parse_nodes, {"nodes": {"n1": {}}}, "node list: nodes: expected a list, got an object"),
    (parse_nodes, {"nodes": [{"name": "n1", "state_flags": 5}]},
     "node list: nodes[0]: state_flags: expected a list, got a number"),
    (parse_nodes, {"nodes": [{"name": ["n1"]}]},
     "node list: nodes[0]: name: expected a string, got a list"),
    (parse_nodes, {"nodes": [{"name": "n1", "reason": {"a": 1}}]},
     "node list: nodes[0]: reason: expected a string, got an object"),
    (parse_nodes, {"errors": True, "nodes": []},
     "node list: errors: expected a list, got a boolean"),
    (parse_nodes, {"errors": {"a": 1}, "nodes": []},
     "node list: errors: expected a list, got an object"),
    (parse_nodes, {"errors": 5, "nodes": []}, "node list: errors: expected a list, got a number"),
    (parse_nodes, {"errors": [{"description": [1]}], "nodes": []},
     "node list: Slurm reported an error: {'description': [1]}"),
    (parse_squeue, {"jobs": [1]}, "squeue --json: jobs[0]: expected an object, got a number"),
    (parse_squeue, {"jobs": "x"}, "squeue --json: jobs: expected a list, got a string"),
    (parse_squeue, {"jobs": 3}, "squeue --json: jobs: expected a list, got a number"),
    (parse_squeue, {"jobs": [{"job_id": 1, "nodes": ["n1"]}]},
     "squeue --json: jobs[0]: nodes: expected a string, got a list"),
    (parse_sacct, {"jobs": [1]}, "sacct --json: jobs[0]: expected an object, got a number"),
    (parse_sacct, {"jobs": [{"time": "x"}]},
     "sacct --json: jobs[0]: time: expected an object, got a string"),
    (parse_sacct, {"jobs": [{"time": [1]}]},
     "sacct --json: jobs[0]: time: expected an object, got a list"),
    (parse_sacct, {"jobs": [{"state": {"current": "FAILED", "reason": [1]}}]},
     "sacct --json: jobs[0]: state.reason: expected a string, got a list"),
    (parse_squeue, [1], "squeue --json: expected a JSON object, got a list"),
]


@pytest.mark.parametrize(("parse", "doc", "message"), BAD_SHAPES)
def test_unexpected_json_shapes_are_one_parse_error(parse: object, doc: object,
                                                    message: str) -> None:
    assert callable(parse)
    with pytest.raises(SlurmParseError) as info:
        parse(json.dumps(doc))
    assert str(info.value) == message


@pytest.mark.parametrize(("text", "message"), [
    ('{"jobs": [' + "9" * 5000 + "]}",
     "squeue --json: not JSON gantry can read (a number of more than 4,300 digits)"),
    ("[" * 100_000 + "]" * 100_000, "squeue --json: nested too deeply to be Slurm's JSON"),
])
def test_json_past_python_limits_is_one_parse_error(text: str, message: str) -> None:
    with pytest.raises(SlurmParseError) as info:
        parse_squeue(text)
    assert str(info.value) == message


@pytest.mark.parametrize(("raw", "expected"), [
    (float("inf"), None), (float("nan"), None), ("9" * 5000, None), ("\u00b2", None),
    ("-3", -3), ({"set": True, "number": float("inf")}, None),
    ({"set": True, "number": {"set": True, "number": 4}}, None), ([1], None),
])
def test_number_is_none_for_what_is_not_a_whole_number(raw: object, expected: int | None) -> None:
    assert number(raw) == expected


def test_odd_exit_codes_states_and_versions_do_not_raise() -> None:
    jobs = parse_squeue(json.dumps({"jobs": [
        {"job_id": 1, "job_state": "FAILED", "exit_code": {"status": 5, "return_code": 2}},
        {"job_id": 2, "job_state": "FAILED", "exit_code": float("inf")},
        {"job_id": 3, "job_state": {"a": 1}, "node_count": "\u00b2"},
    ]}))
    assert [(j.exit_code, j.state, j.node_count) for j in jobs] == [
        (2, "FAILED", None), (None, "FAILED", None), (None, "UNKNOWN", None)]
    assert parse_nodes(json.dumps({"nodes": [{"name": "n1", "state": "IDLE",
                                              "state_flags": "DRAIN"}]}))[0].drained
    for meta in ("x", {"slurm": "x"}, {"slurm": {"version": [1]}},
                 {"slurm": {"version": {"major": float("inf"), "minor": 1, "micro": 1}}},
                 {"slurm": {"version": {"major": "\u00b2", "minor": 1, "micro": 1}}}):
        assert meta_version(json.dumps({"meta": meta})) is None
    for text in ("slurm \u00b2\u00b2.05.8", "slurm " + "9" * 5000 + ".05.8"):
        with pytest.raises(SlurmParseError, match="sbatch --version: cannot read a Slurm "):
            parse_version(text, "sbatch --version")


@pytest.mark.parametrize(("state", "flags", "word"), [
    ("IDLE", (), "idle"), ("MIXED", (), "mixed"), ("ALLOCATED", (), "allocated"),
    ("IDLE", ("NOT_RESPONDING",), "idle*"), ("DOWN", ("NOT_RESPONDING",), "down*"),
    ("IDLE", ("DRAIN",), "drained"), ("MIXED", ("DRAIN",), "draining"),
    ("ALLOCATED", ("DRAIN",), "draining"), ("IDLE", ("DRAIN", "COMPLETING"), "draining"),
    ("IDLE", ("COMPLETING",), "completing"), ("ALLOCATED", ("COMPLETING",), "allocated+"),
    ("IDLE", ("FAIL",), "fail"), ("ALLOCATED", ("FAIL",), "failing"),
    ("IDLE", ("INVALID_REG", "NOT_RESPONDING"), "inval"), ("FUTURE", (), "future"),
    ("UNKNOWN", ("NOT_RESPONDING",), "unknown*"), ("IDLE", ("POWERED_DOWN",), "idle~"),
])
def test_node_states_in_sinfos_words(state: str, flags: tuple[str, ...], word: str) -> None:
    """What `gantry cluster status` shows: sinfo's %T word for Slurm's JSON record."""
    assert sinfo_state(NodeInfo("n1", state, flags)) == word
