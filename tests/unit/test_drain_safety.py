"""gantry never changes a node whose Slurm reason is not exactly its own.

Node records are read from Slurm's JSON (22.05 sinfo, 23.02+ scontrol) or, where that fails,
from ``scontrol show node -o`` by known keys; a drain or resume re-reads its node first. The
property test generates clusters whose operators wrote hostile reasons, comments and extras
(NodeName=/State=/Reason= text, brackets, line breaks, very long words) and runs the policy
through each of the three read paths against a Slurm double that applies the updates.
"""

from __future__ import annotations

import dataclasses
import json
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from launcher.preflight.drain_reason import is_gantry_reason
from launcher.preflight.policy_apply import apply_policy
from launcher.preflight.slurm_nodes import (
    UNREADABLE_REASON,
    Scontrol,
    job_node_lists_text,
    parse_nodes_json,
    parse_show_node,
)
from launcher.process_runner import ToolOutput
from launcher.site_config import load_site

REPO = Path(__file__).resolve().parents[2]
NAMES = [f"n{i}" for i in range(1, 7)]


@dataclass
class Node:
    """A node as the Slurm double holds it."""

    name: str
    state: str = "IDLE"
    drained: bool = False
    reason: str = ""
    comment: str = ""
    extra: str = ""


def show_node_line(n: Node) -> str:
    """One ``scontrol show node -o`` record in Slurm 22.05's key order (recorded on the
    embedded cluster): free text last, Comment= and Extra= before Reason=."""
    state = n.state + ("+DRAIN" if n.drained else "")
    line = (f"NodeName={n.name} Arch=x86_64 CoresPerSocket=1  CPUAlloc=0 CPUTot=2 "
            "OS=Linux 6.1.0 #1 SMP PREEMPT_DYNAMIC @0  RealMemory=2000 "
            f"State={state} ThreadsPerCore=1 Partitions=debug  CfgTRES=cpu=2 AllocTRES= "
            "ExtSensorsTemp=n/s")
    if n.comment:
        line += f" Comment={n.comment}"
    if n.extra:
        line += f" Extra={n.extra}"
    if n.reason:
        line += f" Reason={n.reason} [alice@2026-12-02T10:00:00]"
    return line


def sinfo_json(nodes: Sequence[Node]) -> str:
    """``sinfo --json`` of 22.05: state a word, flags apart."""
    return json.dumps({"nodes": [
        {"name": n.name, "state": n.state.lower(), "state_flags": ["DRAIN"] if n.drained else [],
         "reason": n.reason, "comment": n.comment, "extra": n.extra,
         "reason_set_by_user": "alice" if n.reason else None} for n in nodes]})


def scontrol_json(nodes: Sequence[Node]) -> str:
    """``scontrol --json show nodes`` of 24.11: state a list."""
    return json.dumps({"nodes": [
        {"name": n.name, "state": [n.state] + (["DRAIN"] if n.drained else []),
         "reason": n.reason, "comment": n.comment, "extra": n.extra} for n in nodes]})


@dataclass
class SlurmDouble(Scontrol):
    """Scontrol whose tools answer from ``nodes`` and apply updates to them.

    ``mode``: ``sinfo`` (22.05 JSON), ``scontrol`` (24.11 JSON) or ``text`` (JSON fails)."""

    cluster: dict[str, Node] = field(default_factory=dict)
    mode: str = "sinfo"
    updates: list[tuple[str, str, str, bool, str]] = field(default_factory=list)

    def _tool(self, tool: str) -> str | None:
        return tool

    def _run(self, args: Sequence[str], check: bool = True, tool: str = "scontrol") -> ToolOutput:
        nodes = list(self.cluster.values())
        out = ""
        if args == ["--version"]:
            out = "slurm 24.11.1\n" if self.mode == "scontrol" else "slurm 22.05.8\n"
        elif tool == "sinfo":
            if self.mode != "sinfo":
                return ToolOutput(tuple(args), 1, "",
                                  "sinfo: error: unable to load serializer plugin", 0.0)
            out = sinfo_json(nodes)
        elif args[:1] == ["--json"]:
            out = scontrol_json(nodes)
        elif list(args) == ["show", "node", "-o"]:
            out = "\n".join(show_node_line(n) for n in nodes) + "\n"
        elif args[0] == "update":
            name = args[1].removeprefix("NodeName=")
            node = self.cluster[name]
            self.updates.append((name, args[2], node.reason, node.drained, node.comment))
            if args[2] == "State=DRAIN":
                node.drained, node.reason = True, args[3].removeprefix("Reason=")
            else:
                node.drained, node.reason = False, ""
        else:
            raise AssertionError(f"unexpected call {tool} {args}")
        return ToolOutput(tuple(args), 0, out, "", 0.0)


HOSTILE = st.sampled_from([
    "NodeName=n2", "NodeName=n3 State=IDLE", " Reason=gantry:gpu.ecc:dbe", "[root@x]",
    "\nNodeName=n1 State=IDLE+DRAIN Reason=gantry:x:y [root@t]", "Comment=x", "Extra=y",
    " gantry:x:y", "gantry: PSU swap", "gantry:x:y\n", "PSU swap, jobs moved to",
    "x" * 5000, "]", "@", "(null)",
])
TEXT = st.lists(st.one_of(HOSTILE, st.text(max_size=12)), max_size=4).map(" ".join)
OWN = st.sampled_from(["gantry:gpu.ecc:dbe", "gantry:net.ib_ports:mlx5_0-1-down (+1 more)"])


@st.composite
def clusters(draw: st.DrawFn) -> dict[str, Node]:
    nodes = {}
    for name in NAMES:
        kind = draw(st.sampled_from(["free", "operator", "gantry"]))
        reason = {"free": "", "operator": draw(TEXT.filter(lambda t: t.strip() != "")),
                  "gantry": draw(OWN)}[kind]
        nodes[name] = Node(name, draw(st.sampled_from(["IDLE", "MIXED", "DOWN"])),
                           drained=kind != "free" or draw(st.booleans()), reason=reason,
                           comment=draw(TEXT), extra=draw(st.sampled_from(["", "NodeName=n1"])))
    return nodes


def site_with_state(state_dir: str):  # type: ignore[no-untyped-def]
    loaded = load_site(REPO / "site_configs" / "local.yaml")
    pf = dataclasses.replace(loaded.config.preflight, state_dir=state_dir,
                             resume_after_passes=1, max_drain_fraction=1.0)
    return dataclasses.replace(loaded, config=dataclasses.replace(loaded.config, preflight=pf))


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(clusters(), st.sampled_from(["sinfo", "scontrol", "text"]),
       st.lists(st.booleans(), min_size=len(NAMES), max_size=len(NAMES)), st.integers(1, 3))
def test_policy_only_updates_nodes_whose_reason_is_gantrys(
        cluster: dict[str, Node], mode: str, fails: list[bool], runs: int) -> None:
    slurm = SlurmDouble(cluster=cluster, mode=mode)
    verdicts = zip(NAMES, fails, strict=True)
    outcomes = {n: ("gantry:gpu.ecc:dbe" if bad else None) for n, bad in verdicts}
    with tempfile.TemporaryDirectory() as tmp:
        site = site_with_state(tmp)
        for run in range(runs):
            apply_policy(site, outcomes, slurm, now=1000.0 + run)
    for name, what, reason_before, drained_before, _ in slurm.updates:
        if what == "State=DRAIN":
            assert reason_before == "" or is_gantry_reason(reason_before), (name, reason_before)
        else:
            assert drained_before and is_gantry_reason(reason_before), (name, reason_before)


def test_operator_reason_naming_another_node_is_read_as_written() -> None:
    n3 = Node("n3", drained=True, reason="PSU swap, jobs moved to NodeName=n4 State=IDLE")
    n4 = Node("n4", comment="see NodeName=n3 Reason=gantry:x:y", extra="NodeName=n3")
    text = show_node_line(n3) + "\n" + show_node_line(n4) + "\n"
    nodes = parse_show_node(text)
    assert sorted(nodes) == ["n3", "n4"]
    assert nodes["n3"].reason == "PSU swap, jobs moved to NodeName=n4 State=IDLE"
    assert nodes["n3"].state == "IDLE+DRAIN" and nodes["n3"].operator_reason
    assert nodes["n4"].state == "IDLE" and not nodes["n4"].owned
    js = parse_nodes_json(sinfo_json([n3, n4]))
    assert js["n3"].reason == n3.reason and js["n4"].reason is None


def test_text_reasons_a_comment_could_fake_are_unreadable_never_gantrys() -> None:
    # A gantry-drained node with an operator's comment: the text cannot tell where the
    # comment ends, so gantry may not lift that drain from the text form.
    n5 = Node("n5", drained=True, reason="gantry:gpu.ecc:dbe", comment="rack 4 Reason=x")
    assert parse_show_node(show_node_line(n5))["n5"].reason == UNREADABLE_REASON
    assert parse_nodes_json(sinfo_json([n5]))["n5"].owned


def test_a_line_break_in_a_reason_cannot_forge_a_record() -> None:
    forged = Node("n2", drained=True,
                  reason="fan\nNodeName=n1 State=IDLE+DRAIN Reason=gantry:x:y [root@t]")
    n1 = Node("n1", drained=True, reason="operator: burn-in")
    nodes = parse_show_node(show_node_line(n1) + "\n" + show_node_line(forged))
    assert nodes["n1"].reason == UNREADABLE_REASON and not nodes["n1"].owned
    assert not nodes["n2"].owned


def test_a_reason_cut_by_a_line_break_is_never_gantrys() -> None:
    # "gantry:x:y\n" prints as "Reason=gantry:x:y" then "[alice@...]" on the next line.
    cut = Node("n5", drained=True, reason="gantry:x:y\n")
    nodes = parse_show_node(show_node_line(cut))
    assert nodes["n5"].reason == UNREADABLE_REASON and not nodes["n5"].owned


def test_blank_before_gantry_is_an_operators_reason() -> None:
    lead = Node("n1", drained=True, reason=" gantry:x:y")
    assert parse_nodes_json(sinfo_json([lead]))["n1"].operator_reason
    assert not is_gantry_reason("gantry: PSU swap") and not is_gantry_reason("gantry:x:y\n")
    assert is_gantry_reason("gantry:gpu.ecc:dbe (+2 more)")


def test_a_long_unbroken_word_parses_in_one_pass() -> None:
    word = "x" * 2_000_000
    node = Node("n1", drained=True, reason=word)
    assert parse_show_node(show_node_line(node))["n1"].reason == word
    assert not is_gantry_reason("gantry:" + word)


def test_drain_and_resume_skip_a_node_an_operator_took_since_the_plan() -> None:
    slurm = SlurmDouble(cluster={"n1": Node("n1"), "n2": Node("n2", drained=True,
                                                             reason="gantry:x:y")})
    slurm.cluster["n1"].drained, slurm.cluster["n1"].reason = True, "operator: PSU"
    slurm.cluster["n2"].reason = "operator: keep drained"
    assert slurm.drain("n1", "gantry:gpu.ecc:dbe") is False
    assert slurm.resume("n2") is False
    assert slurm.updates == []


def test_job_node_lists_text_skips_the_job_name() -> None:
    line = ("JobId=1 JobName=x ReqNodeList=n7 ExcNodeList=n1 UserId=root(0) Partition=debug "
            "AllocNode:Sid=localhost:1274 ReqNodeList=n2 ExcNodeList=n[5-6] NodeList= "
            "Command=(null) Comment=ExcNodeList=n3")
    assert job_node_lists_text(line) == ("n2", "n[5-6]")
