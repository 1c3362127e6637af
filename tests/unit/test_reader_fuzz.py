"""Fuzzes gantry's readers of files and tool output directly (no CLI around them): topology
files (topology.conf, topology.yaml, `scontrol show topology` text), hostlists, Slurm's JSON
records, a run's metrics.jsonl and trace.json (and the report's arithmetic over them),
rank-order files and `gate --reports` text. For any generated input a reader returns or
raises GantryError (one line for the user); any other exception is a bug. Inputs are small
(a few hundred bytes to a few kB), so each test stays bounded; GANTRY_FUZZ_EXAMPLES=2000
hunts deeper."""

from __future__ import annotations

import json
import math
import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from launcher.errors import GantryError
from launcher.preflight.gate import outcomes_for, read_verdicts
from launcher.preflight.result import CheckResult
from launcher.preflight.verdict import NodeVerdict
from launcher.report import run_data, timeline
from launcher.report.theory import measured_op_costs
from launcher.slurm import records
from launcher.train.layout import read_rank_order
from tests.unit.test_input_fuzz import (
    BASE_BLOCK_CONF,
    BASE_TOPOLOGY_CONF,
    BASE_TOPOLOGY_YAML,
    conf_text,
    mutated,
    yaml_input,
)
from topology import hostlists
from topology.build import build_topology
from topology.conf_format import parse_topology_conf
from topology.scontrol_format import parse_scontrol_topology
from topology.yaml_format import parse_topology_yaml

READERS = settings(
    max_examples=int(os.environ.get("GANTRY_FUZZ_EXAMPLES", "200")),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
REPO = Path(__file__).resolve().parent.parent.parent
SLURM_FIXTURES = REPO / "tests" / "fixtures" / "slurm"
NODES = [f"n{i}" for i in range(1, 9)]


def returns_or_gantry_error(read: Callable[[], object]) -> object:
    """``read()``; a GantryError is an answer too (its message one line); any other
    exception propagates and fails the test with the shrunk input."""
    try:
        return read()
    except GantryError as err:
        assert "\n" not in str(err), str(err)
        return err


# ---------------------------------------------------------------------------------------------
# Numbers and words the readers must survive: past int()'s 4,300-digit limit, digits that
# str.isdigit() takes and int() refuses or reads differently, non-finite floats.

HUGE = "9" * 5000
NUMBER_WORDS = st.sampled_from([
    "0", "1", "-1", "2", "18446744073709551616", HUGE, "1" + "0" * 4400, "\u00b2", "\u0663",
    "\u00b2\u00b3", "1\u00b2", "١٢", "1e5", "0x10", "nan", "inf", "", " 4", "4 ", "+3",
])
WORDS = st.one_of(NUMBER_WORDS, st.sampled_from([
    "n1", "n[1-8]", "n[1-", "n[" + HUGE + "]", "n[1-" + HUGE + "]", "n[00-" + "9" * 80 + "]",
    "leaf1", "s[0-1]", "b[1-2]", '"', "a b", "\\", "#", "(null)", "n\u00b2", "é",
]), st.text(max_size=10))


# ---------------------------------------------------------------------------------------------
# Topology files and `scontrol show topology`.


@st.composite
def number_heavy_conf(draw: st.DrawFn) -> str:
    """A tree or block topology.conf whose numbers (BlockSizes=, LinkSpeed=, hostlist
    ranges) are replaced by number words, or conf_text's edits."""
    if draw(st.booleans()):
        return draw(conf_text())
    text = draw(st.sampled_from([BASE_TOPOLOGY_CONF, BASE_BLOCK_CONF]))
    for old in ("2,4", "100", "200", "1-4", "5-8", "1-2"):
        if old in text and draw(st.booleans()):
            text = text.replace(old, draw(NUMBER_WORDS), 1)
    return text


@READERS
@given(text=number_heavy_conf())
@example(text="BlockSizes=2," + HUGE + "\nBlockName=b1 Nodes=n[1-4]\n")
@example(text="SwitchName=s1 Nodes=n[1-" + HUGE + "]\n")
def test_topology_conf_reader(text: str) -> None:
    def read() -> object:
        return build_topology(parse_topology_conf(text, "t.conf"), NODES)
    returns_or_gantry_error(read)


@READERS
@given(text=yaml_input(BASE_TOPOLOGY_YAML))
@example(text="- topology: b\n  block:\n    block_sizes: [2, " + HUGE + "]\n    blocks:\n"
              "    - {block: b1, nodes: 'n[1-4]'}\n")
def test_topology_yaml_reader(text: str) -> None:
    returns_or_gantry_error(lambda: build_topology(parse_topology_yaml(text, "t.yaml"), NODES))


SCONTROL_KEYS = ["SwitchName", "Level", "LinkSpeed", "Nodes", "Switches", "BlockName",
                 "BlockIndex", "BlockSize", "AggregatedBlock", "Bogus"]


@st.composite
def scontrol_text(draw: st.DrawFn) -> str:
    """`scontrol show topology` lines: Key=Value tokens, keys from Slurm's, values words."""
    lines = []
    for _ in range(draw(st.integers(0, 5))):
        first = draw(st.sampled_from(["SwitchName", "BlockName", "AggregatedBlock", "Hello"]))
        tokens = [f"{first}={draw(WORDS)}"]
        for _ in range(draw(st.integers(0, 4))):
            key = draw(st.sampled_from(SCONTROL_KEYS))
            tokens.append(draw(st.sampled_from([f"{key}={draw(WORDS)}", key])))
        lines.append(" ".join(tokens))
    return "\n".join(lines) + "\n"


@READERS
@given(text=scontrol_text())
@example(text="SwitchName=s0 Level=" + HUGE + " Nodes=n1\n")
@example(text="BlockName=b1 Nodes=n[1-4] BlockSize=\u00b2\n")
def test_scontrol_topology_reader(text: str) -> None:
    returns_or_gantry_error(lambda: build_topology(parse_scontrol_topology(text)))


@READERS
@given(expression=st.one_of(WORDS, st.lists(WORDS, max_size=4).map(",".join),
                            st.text(alphabet="n0123456789[]-,\u00b2", max_size=30)),
       names=st.lists(WORDS, max_size=4))
@example(expression="n[1-" + HUGE + "]", names=["n" + HUGE])
def test_hostlists(expression: str, names: list[str]) -> None:
    expanded = returns_or_gantry_error(lambda: hostlists.expand(expression, "--nodes"))
    if isinstance(expanded, list):
        assert len(expanded) <= 100_000  # python-hostlist's bound on one expression
        returns_or_gantry_error(lambda: hostlists.collect(expanded))
    returns_or_gantry_error(lambda: hostlists.collect(names))


# ---------------------------------------------------------------------------------------------
# Slurm's JSON: any JSON value, and the recorded documents with values replaced at any depth.

JSON_SCALARS = st.one_of(
    st.none(), st.booleans(), st.integers(), st.floats(), st.text(max_size=8), NUMBER_WORDS,
    st.sampled_from([10**400, -(2**63), 2**64, math.inf, math.nan, "RUNNING", "IDLE+DRAIN",
                     ["IDLE", "DRAIN"], "SIGNALED"]),
)
SLURM_KEYS = st.sampled_from([
    "jobs", "nodes", "errors", "meta", "job_id", "array_job_id", "array_task_id", "job_state",
    "exit_code", "state", "state_flags", "time", "name", "reason", "reason_set_by_user",
    "node_count", "status", "return_code", "signal", "id", "number", "set", "infinite",
    "Slurm", "slurm", "version", "major", "minor", "micro", "current", "limit", "start",
    "description", "error",
])
JSON_VALUES = st.recursive(
    JSON_SCALARS,
    lambda inner: st.one_of(st.lists(inner, max_size=3),
                            st.dictionaries(st.one_of(SLURM_KEYS, st.text(max_size=4)), inner,
                                            max_size=4)),
    max_leaves=12,
)
SLURM_DOCS = [json.loads(p.read_text()) for p in sorted(SLURM_FIXTURES.glob("*/*.json"))]
SLURM_PARSERS: dict[str, Callable[[str], object]] = {
    "nodes": records.parse_nodes, "squeue": records.parse_squeue,
    "sacct": records.parse_sacct, "meta": records.meta_version,
}


def _json_text(value: Any) -> str:
    return json.dumps(value, allow_nan=True)


SLURM_TEXT = st.one_of(
    JSON_VALUES.map(_json_text),
    st.dictionaries(st.sampled_from(["jobs", "nodes", "errors", "meta"]), JSON_VALUES,
                    max_size=3).map(_json_text),
    st.one_of(*(mutated(doc) for doc in SLURM_DOCS)).map(_json_text),
    st.sampled_from(['{"jobs": [' + HUGE + "]}", "[" * 5000, "", "{", "slurm 24.11.1"]),
)


@READERS
@given(text=SLURM_TEXT, parser=st.sampled_from(sorted(SLURM_PARSERS)))
@example(text='{"nodes": [1]}', parser="nodes")
@example(text='{"errors": true}', parser="squeue")
@example(text='{"jobs": [{"time": "x"}]}', parser="sacct")
def test_slurm_json_records(text: str, parser: str) -> None:
    returns_or_gantry_error(lambda: SLURM_PARSERS[parser](text))


@READERS
@given(text=st.one_of(st.text(max_size=30), st.lists(WORDS, max_size=3).map(" ".join),
                      NUMBER_WORDS.map(lambda n: f"slurm {n}.05.8")))
@example(text="slurm " + HUGE + ".05.8")
def test_slurm_version_text(text: str) -> None:
    returns_or_gantry_error(lambda: records.parse_version(text, "sbatch --version"))


# ---------------------------------------------------------------------------------------------
# A run's metrics.jsonl and trace.json, and what the report computes from them.

TIMINGS = {k: 0.25 for k in run_data.TIMING_KEYS}
BASE_RECORD: dict[str, Any] = {"step": 1, "loss": 3.5, "tokens_per_s": 1000.0, "lr": 1e-3,
                               "grad_norm": 0.5, "ranks": [TIMINGS, {**TIMINGS}]}
BASE_EVENTS: list[Any] = [
    {"name": f"{op} s{s} mb{m}", "cat": "compute", "ph": "X", "pid": s, "tid": 0,
     "ts": 1000.0 * (s + m + (op == "backward")), "dur": 800.0,
     "args": {"step": step, "stage": s, "micro_batch": m}}
    for step in (0, 1) for s in (0, 1) for m in (0, 1) for op in ("forward", "backward")
] + [{"name": "wait recv_grad s0 mb0", "cat": "wait", "ph": "X", "pid": 0, "tid": 0,
      "ts": 2500.0, "dur": 100.0, "args": {"step": 1, "stage": 0, "micro_batch": 0}},
     {"name": "process_name", "ph": "M", "pid": 0, "args": {"name": "rank 0"}}]
NUMBERS = st.one_of(st.floats(), st.integers(), st.sampled_from(
    [1e100, 1.0000001e100, 1e308, -1e308, 10**400, 2**31, 2**31 - 1, -0.0, 5e-324]))


@st.composite
def metrics_text(draw: st.DrawFn) -> str:
    """A few metrics lines: the base record with fields replaced by numbers (finite, huge,
    non-finite) or other JSON values, or garbage lines."""
    lines = []
    for step in range(1, draw(st.integers(1, 4)) + 1):
        record = {**BASE_RECORD, "step": step}
        for _ in range(draw(st.integers(0, 2))):
            key = draw(st.sampled_from([*BASE_RECORD, "ranks.0"]))
            value = draw(st.one_of(NUMBERS, NUMBERS, JSON_VALUES))
            if key == "ranks.0":
                record["ranks"] = [{**TIMINGS, draw(st.sampled_from(sorted(TIMINGS))): value}]
            else:
                record[key] = value
        lines.append(_json_text(record))
    if draw(st.booleans()):
        lines.insert(draw(st.integers(0, len(lines))), draw(st.one_of(
            st.text(max_size=20), st.sampled_from(["{", "[" * 3000, '{"step": ' + HUGE + "}"]),
            JSON_VALUES.map(_json_text))))
    return "\n".join(lines) + "\n"


@st.composite
def trace_bytes(draw: st.DrawFn) -> bytes:
    """The base trace with fields of some events replaced, mutated anywhere, or garbage."""
    choice = draw(st.sampled_from(["fields", "mutated", "garbage"]))
    if choice == "garbage":
        return draw(st.one_of(st.binary(max_size=40), st.sampled_from(
            [b"[" * 5000, b'[{"ph": "X", "ts": ' + HUGE.encode() + b"}]", b"\xff\xfe"])))
    if choice == "mutated":
        return _json_text(draw(mutated({"traceEvents": BASE_EVENTS}))).encode()
    events = json.loads(json.dumps(BASE_EVENTS))
    for _ in range(draw(st.integers(1, 3))):
        event = events[draw(st.integers(0, len(events) - 1))]
        key = draw(st.sampled_from(["ts", "dur", "pid", "args.step", "args.stage",
                                    "args.micro_batch", "name", "cat"]))
        value = draw(st.one_of(NUMBERS, JSON_VALUES))
        if key.startswith("args."):
            event["args"] = {**event.get("args", {}), key[5:]: value}
        else:
            event[key] = value
    return _json_text({"traceEvents": events}).encode()


def report_arithmetic(metrics: list[run_data.StepRecord],
                      events: list[run_data.TraceEvent]) -> None:
    """What the report computes before drawing: none of it may raise on what was read."""
    merged = run_data.merge_attempts([metrics])
    timeline.measured_bubble(merged)
    traced = timeline.steps_in(events)
    if traced:
        timeline.step_timeline(events, timeline.typical_step(merged, traced))
        timeline.totals_by_rank(events)
        measured_op_costs(events)


@READERS
@given(metrics=metrics_text(), trace=trace_bytes())
@example(metrics=_json_text({**BASE_RECORD, "loss": 1e308}) + "\n", trace=b"[]")
@example(metrics=_json_text({**BASE_RECORD, "loss": 10**400}) + "\n", trace=b"[]")
@example(metrics=_json_text({**BASE_RECORD, "step": math.inf}) + "\n", trace=b"[]")
def test_run_data_readers(metrics: str, trace: bytes) -> None:
    with tempfile.TemporaryDirectory(prefix="gantry-fuzz-") as name:
        metrics_path, trace_path = Path(name) / "metrics.jsonl", Path(name) / "trace.json"
        metrics_path.write_text(metrics, encoding="utf-8")
        trace_path.write_bytes(trace)
        read = returns_or_gantry_error(lambda: run_data.read_metrics(metrics_path))
        events = returns_or_gantry_error(lambda: run_data.read_trace(trace_path))
    if isinstance(read, list) and isinstance(events, list):
        for record in read:
            for value in (record.tokens_per_s, record.lr, *(
                    getattr(t, k) for t in record.ranks for k in run_data.TIMING_KEYS)):
                assert math.isfinite(value) and abs(value) <= run_data.MAX_MAGNITUDE
        report_arithmetic(read, events)


# ---------------------------------------------------------------------------------------------
# Rank-order files.

RANK_ORDER = st.one_of(
    st.lists(st.one_of(st.integers(-2, 5), st.sampled_from(NODES[:4]), JSON_SCALARS),
             max_size=5).map(lambda v: yaml.safe_dump(v, allow_unicode=True).encode()),
    mutated([1, 0, 3, 2]).map(lambda v: yaml.safe_dump(v, allow_unicode=True).encode()),
    yaml_input(["n2", "n1", "n4", "n3"]).map(lambda t: t.encode("utf-8")),
    st.binary(max_size=30),
    st.sampled_from([b"\xff\xfe[0]", b"[" * 100_000, b"&a [*a, *a]", b"[" + HUGE.encode() + b"]",
                     b"!!python/object/apply:os.system [ls]"]),
)


@READERS
@given(content=RANK_ORDER, world=st.integers(1, 4), by_node=st.booleans())
@example(content=b"\xff\xfe[0]\n", world=1, by_node=False)
@example(content=b"[" * 100_000 + b"]" * 100_000, world=1, by_node=False)
@example(content=b"- '\n\n'\n- .", world=2, by_node=True)  # a node name that is a line break
def test_rank_order_reader(content: bytes, world: int, by_node: bool) -> None:
    rank_nodes = [NODES[r // 2] for r in range(world)] if by_node else None
    with tempfile.TemporaryDirectory(prefix="gantry-fuzz-") as name:
        path = Path(name) / "rank_order.yaml"
        path.write_bytes(content)
        order = returns_or_gantry_error(lambda: read_rank_order(path, world, rank_nodes))
    if isinstance(order, list):
        assert sorted(order) == list(range(world))


# ---------------------------------------------------------------------------------------------
# `gantry gate --reports`: srun output, labelled or one JSON verdict per line.

PASSED = NodeVerdict(node="n1", level="quick", status="PASS",
                     started_at="2026-11-30T12:00:00+00:00", duration_s=0.1,
                     gantry_version="0", gpu_source="none",
                     checks=[CheckResult("host.cpus", "PASS", "2", ">= 2")]).to_dict()
LABELS = st.one_of(st.integers(0, 3).map(str), NUMBER_WORDS, st.sampled_from([" 1", "x", ""]))
BODIES = st.one_of(
    st.sampled_from(NODES[:3]).map(lambda n: json.dumps({**PASSED, "node": n})),
    mutated(PASSED).map(_json_text),
    JSON_VALUES.map(_json_text),
    st.text(max_size=20),
    st.sampled_from(['{"node": ' + HUGE + "}", "{" + "[" * 3000]),
)


@READERS
@given(lines=st.lists(st.tuples(LABELS, BODIES, st.booleans()), max_size=5))
@example(lines=[("0", json.dumps(PASSED), True), ("\u00b2", "{}", True)])
@example(lines=[(HUGE, "{}", True)])
@example(lines=[("0", '{"node": ' + HUGE + "}", True), ("1", "{" + "[" * 3000, True)])
def test_gate_reports_reader(lines: list[tuple[str, str, bool]]) -> None:
    text = "\n".join(f"{label}: {body}" if labelled else body
                     for label, body, labelled in lines) + "\n"
    verdicts, problems = read_verdicts(text, NODES[:3])
    assert set(verdicts) <= set(NODES[:3])
    assert all("\n" not in problem for problem in problems.values())
    outcomes_for(NODES[:3], verdicts)
