"""The run monitor's sampling and diff logic through preflight's real collectors (fake
nvidia-smi, fake dmesg, a fake sysfs: the tool-path overrides), the Xid table, the loop's
events and eviction, and bad settings as one-line errors."""

from __future__ import annotations

import shutil
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from launcher.errors import UserInputError
from launcher.monitor.run import MonitorOptions, read_health_events, run_monitor
from launcher.monitor.sample import Sample, compare, gpus_watched, take_sample
from launcher.preflight.checks_gpu import check_xid
from launcher.preflight.context import Expectations, NodeFacts
from launcher.preflight.facts import GpuInventory, HostFacts, KernelLog, XidEvent
from launcher.preflight.nvml_collect import nvml_available
from launcher.preflight.thresholds import Thresholds
from launcher.preflight.xid_actions import DEFAULT_XID_ACTIONS, action_of, xid_table
from launcher.recovery.evictions import pending_evictions
from launcher.site_config import load_site
from tests.unit.preflight_helpers import FIXTURES, HEALTHY, gpu_env, make_ib_tree

TABLE = xid_table()
REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def node(tmp_path: Path) -> dict[str, str]:
    """A node whose nvidia-smi, dmesg and sysfs are files the test rewrites."""
    smi = tmp_path / "smi"
    shutil.copytree(HEALTHY, smi)
    dmesg = tmp_path / "dmesg.txt"
    shutil.copy(FIXTURES / "dmesg" / "clean.txt", dmesg)
    make_ib_tree(tmp_path / "sys", {"mlx5_0/1": {"state": "4: ACTIVE",
                                                 "phys_state": "5: LinkUp",
                                                 "rate": "400 Gb/sec (4X NDR)",
                                                 "link_layer": "InfiniBand",
                                                 "link_downed": "0"}})
    return gpu_env(smi, GANTRY_FAKE_DMESG_FILE=str(dmesg),
                   GANTRY_SYSFS_ROOT=str(tmp_path / "sys"))


def sample(env: dict[str, str], now: float = 0.0) -> Sample:
    return take_sample(now, True, 10.0, env)


def findings(first: Sample, now: Sample, previous: Sample | None = None,
             table: dict[int, str] = TABLE) -> list[tuple[str, str, str]]:
    return [(f.check, f.grade, f.word) for f in
            compare(first, previous or first, now, table, Thresholds())]


def test_a_healthy_node_shows_nothing(node: dict[str, str]) -> None:
    first = sample(node)
    assert first.gpu is not None and len(first.gpu.gpus) == 2 and len(first.ib_ports) == 1
    assert findings(first, sample(node, 1.0)) == []


def test_an_xid_79_after_the_first_sample_fails(node: dict[str, str], tmp_path: Path) -> None:
    first = sample(node)
    shutil.copy(FIXTURES / "dmesg" / "xid79.txt", tmp_path / "dmesg.txt")
    now = sample(node, 1.0)
    assert findings(first, now) == [("gpu.xid", "FAIL", "xid-79")] * 2  # two lines logged
    # already in the log at the first sample: not news
    assert findings(now, sample(node, 2.0)) == []


def test_xid_actions_grade_each_code(node: dict[str, str], tmp_path: Path) -> None:
    first = sample(node)
    shutil.copy(FIXTURES / "dmesg" / "xid13.txt", tmp_path / "dmesg.txt")
    now = sample(node, 1.0)
    assert {g for _, g, _ in findings(first, now)} == {"WARN"}  # 13: the application's
    assert findings(first, now, table=xid_table({13: "ignore"})) == []
    assert {g for _, g, _ in findings(first, now, table=xid_table({13: "reset"}))} == {"FAIL"}


def test_row_remap_counter_rising_fails(node: dict[str, str], tmp_path: Path) -> None:
    first = sample(node)
    xml = tmp_path / "smi" / "nvidia-smi-q.xml"
    text = xml.read_text()
    at = text.index("<remapped_row_unc>0</remapped_row_unc>", text.index("<gpu id=") + 1)
    xml.write_text(text[:at] + "<remapped_row_unc>3</remapped_row_unc>"
                   + text[at + len("<remapped_row_unc>0</remapped_row_unc>"):])
    assert findings(first, sample(node, 1.0)) == [("gpu.row_remap", "FAIL", "gpu0-rows")]


def test_a_gpu_gone_fails(node: dict[str, str], tmp_path: Path) -> None:
    first = sample(node)
    shutil.rmtree(tmp_path / "smi")
    shutil.copytree(FIXTURES / "faults" / "gpu-missing", tmp_path / "smi")
    assert ("gpu.inventory", "FAIL", "gpu1-gone") in findings(first, sample(node, 1.0))


def test_a_failing_tool_warns_then_fails(node: dict[str, str], tmp_path: Path) -> None:
    first = sample(node)
    (tmp_path / "smi" / "broken").write_text("")
    once = sample(node, 1.0)
    assert findings(first, once) == [("gpu.inventory", "WARN", "gpu-tool")]
    assert findings(first, sample(node, 2.0), once) == [("gpu.inventory", "FAIL", "gpu-tool")]


def test_a_lasting_hw_slowdown_fails(node: dict[str, str], tmp_path: Path) -> None:
    first = sample(node)
    shutil.copytree(FIXTURES / "faults" / "clocks-hw-slowdown", tmp_path / "smi",
                    dirs_exist_ok=True)
    once = sample(node, 1.0)
    assert {(c, g) for c, g, _ in findings(first, once)} == {("gpu.clocks", "WARN")}
    assert {(c, g) for c, g, _ in findings(first, sample(node, 2.0), once)} == {
        ("gpu.clocks", "FAIL")}


def test_ib_link_downed_rate_and_state(node: dict[str, str], tmp_path: Path) -> None:
    first = sample(node)
    port = tmp_path / "sys" / "class" / "infiniband" / "mlx5_0" / "ports" / "1"
    (port / "counters" / "link_downed").write_text("2\n")
    assert findings(first, sample(node, 1.0)) == [
        ("net.ib_link_downed", "FAIL", "mlx5_0-1-flap")]
    (port / "counters" / "link_downed").write_text("0\n")
    (port / "rate").write_text("200 Gb/sec (4X HDR)\n")
    assert findings(first, sample(node, 2.0)) == [("net.ib_ports", "FAIL", "mlx5_0-1-slow")]
    (port / "state").write_text("1: DOWN\n")
    assert findings(first, sample(node, 3.0)) == [("net.ib_ports", "FAIL", "mlx5_0-1-down")]


def test_gpus_are_watched_as_preflight_decides(node: dict[str, str]) -> None:
    assert gpus_watched(0, node)  # the nvidia-smi override is set
    bare = {"PATH": "/nonexistent"}  # no nvidia-smi, no pynvml (CPU node)
    assert gpus_watched(0, bare) == nvml_available() and gpus_watched(8, bare)
    assert take_sample(0.0, False, 1.0, bare).gpu is None


def test_the_loop_writes_events_once_and_asks_for_an_eviction(node: dict[str, str],
                                                               tmp_path: Path) -> None:
    attempt = tmp_path / "attempt"
    attempt.mkdir()
    dmesg = tmp_path / "dmesg.txt"
    samples = iter(range(100))

    def take(now: float) -> Sample:
        if next(samples) == 2:  # after the first two samples, as mid-run
            shutil.copy(FIXTURES / "dmesg" / "xid79.txt", dmesg)
        return take_sample(now, True, 10.0, node)

    opts = MonitorOptions(attempt, "n2", 0.01, TABLE, Thresholds(), gpus=True, max_samples=5)
    assert run_monitor(opts, threading.Event(), take) == 2
    events = read_health_events(attempt)
    assert [e["check"] for e in events] == ["monitor", "gpu.xid", "gpu.xid", "monitor"]
    assert events[0]["event"] == "start" and "2 GPUs" in events[0]["observed"]
    assert {e["grade"] for e in events[1:3]} == {"FAIL"} and events[1]["node"] == "n2"
    assert events[1]["observed"].startswith("Xid 79 on 0000:00:07: ")
    [asked] = pending_evictions(attempt)
    assert (asked.node, asked.source, asked.what) == ("n2", "health", "health-xid-79")
    assert asked.detail["check"] == "gpu.xid"


def test_the_stop_file_ends_the_loop(node: dict[str, str], tmp_path: Path) -> None:
    (tmp_path / "monitor-stop").write_text("")
    opts = MonitorOptions(tmp_path, "n1", 3600, TABLE, Thresholds(), gpus=False)
    assert run_monitor(opts, threading.Event()) == 0  # returns at once, no hour's wait
    assert [e.get("event") for e in read_health_events(tmp_path)] == ["start", "stop"]


def test_preflight_gpu_xid_uses_the_same_table() -> None:
    def facts(code: int) -> NodeFacts:
        event = XidEvent("0000:00:07", code, 10.0, f"NVRM: Xid (PCI:0000:00:07): {code}")
        return NodeFacts(GpuInventory("none"), KernelLog((event,), 20.0, "b"), (),
                         HostFacts(None, None, None, ()), ())
    exp = Expectations(gpus_per_node=2)
    assert check_xid(facts(79), exp, Thresholds()).status == "FAIL"
    assert "reboot" in check_xid(facts(79), exp, Thresholds()).action
    assert "reset the GPU" in check_xid(facts(48), exp, Thresholds()).action
    assert check_xid(facts(13), exp, Thresholds()).status == "WARN"
    assert check_xid(facts(999), exp, Thresholds()).status == "WARN"  # unlisted: warn
    ignore = Expectations(gpus_per_node=2, xid_actions=xid_table({13: "ignore"}))
    assert check_xid(facts(13), ignore, Thresholds()).status == "PASS"
    assert action_of(DEFAULT_XID_ACTIONS, 79) == "drain"
    assert {DEFAULT_XID_ACTIONS[c] for c in (13, 31, 43)} == {"warn"}


@pytest.mark.parametrize(("text", "needle"), [
    ("  xid_actions: {79: reboot}\n",
     "preflight.xid_actions[79]: 'reboot' is not allowed (expected one of 'drain', 'reset', "
     "'warn', 'ignore')"),
    ("  xid_actions: {0: drain}\n", "preflight.xid_actions: 0: not an Xid"),
    ("  xid_actions: {bus: drain}\n", "preflight.xid_actions.bus: 'bus' is not allowed"),
    ("  monitor_interval_s: -1\n", "preflight.monitor_interval_s: -1 is not allowed"),
])
def test_bad_monitor_settings_are_one_line_errors(tmp_path: Path, text: str,
                                                  needle: str) -> None:
    site = tmp_path / "site.yaml"
    site.write_text(f"name: s\nnodes: {{names: 'n[1-2]'}}\npreflight:\n{text}")
    with pytest.raises(UserInputError) as err:
        load_site(site)
    assert needle in str(err.value) and "\n" not in str(err.value), str(err.value)


def test_monitor_command_bad_input_is_one_line(tmp_path: Path) -> None:
    result = subprocess.run([sys.executable, "-m", "launcher", "monitor", "--attempt-dir",
                             str(tmp_path / "missing"), "--interval", "1"],
                            capture_output=True, text=True, cwd=REPO, check=False)
    assert result.returncode == 2
    assert result.stderr == f"error: --attempt-dir {tmp_path / 'missing'}: not a directory\n"
    result = subprocess.run([sys.executable, "-m", "launcher", "monitor", "--attempt-dir",
                             str(tmp_path), "--interval", "0"],
                            capture_output=True, text=True, cwd=REPO, check=False)
    assert result.returncode == 2 and "--interval: 0 is not allowed" in result.stderr


def test_the_loop_rewrites_its_nodes_textfile(node: dict[str, str], tmp_path: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    from prometheus_client.parser import text_string_to_metric_families

    from tests.unit.goodput_dirs import JOB
    from tests.unit.test_metrics_textfile import a_job

    job = a_job(tmp_path)
    monkeypatch.setenv("GANTRY_JOB_DIR", str(job))
    attempt = job / "runs" / f"{JOB}-0.1"  # the newest attempt: its nodes n1, n3
    out = tmp_path / "prom"
    out.mkdir()
    dmesg = tmp_path / "dmesg.txt"
    samples = iter(range(100))

    def take(now: float) -> Sample:
        if next(samples) == 1:
            shutil.copy(FIXTURES / "dmesg" / "xid79.txt", dmesg)
        return take_sample(now, True, 10.0, node)

    opts = MonitorOptions(attempt, "n3", 0.01, TABLE, Thresholds(), gpus=True, evict=False,
                          max_samples=3, textfile_dir=out)
    assert run_monitor(opts, threading.Event(), take) == 2  # the fixture's two Xid lines
    [written] = out.iterdir()
    assert written.name.endswith("_n3.prom")
    samples_by_name = {f.name: [(s.labels, s.value) for s in f.samples]
                       for f in text_string_to_metric_families(written.read_text())}
    [(labels, count)] = samples_by_name["gantry_health_events"]
    assert (labels["node"], labels["check"], labels["grade"], count) == ("n3", "gpu.xid",
                                                                         "FAIL", 2.0)
