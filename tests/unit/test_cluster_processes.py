"""Pid records, identity checks and stopping, against real processes (sleep, python)."""

from __future__ import annotations

import dataclasses
import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from launcher.cluster import processes
from launcher.cluster.layout import RunLayout
from launcher.cluster.ports import busy_ports, connectable, find_free_port_block, port_is_free


@pytest.fixture
def layout(tmp_path: Path) -> RunLayout:
    layout = RunLayout(tmp_path / "run")
    for directory in layout.directories([]):
        directory.mkdir(parents=True, exist_ok=True)
    return layout


@pytest.fixture
def sleeper(layout: RunLayout) -> Iterator[subprocess.Popen[bytes]]:
    proc = processes.start_daemon(layout, "sleeper", ["sleep", "60"], dict(os.environ))
    yield proc
    if proc.poll() is None:
        proc.kill()
        proc.wait()


def test_start_writes_a_record_that_identifies_the_process(
    layout: RunLayout, sleeper: subprocess.Popen[bytes]
) -> None:
    [record] = processes.read_records(layout)
    assert record.daemon == "sleeper"
    assert record.pid == sleeper.pid
    assert record.argv == ["sleep", "60"]
    assert processes.is_ours(record)
    stat = processes.read_stat(sleeper.pid)
    assert stat is not None and stat.session == sleeper.pid  # its own session leader


def test_a_recycled_pid_is_not_ours_and_is_not_signalled(
    layout: RunLayout, sleeper: subprocess.Popen[bytes]
) -> None:
    [record] = processes.read_records(layout)
    other_start = dataclasses.replace(record, start_time=record.start_time + 1)
    other_argv = dataclasses.replace(record, argv=["sleep", "61"])
    assert not processes.is_ours(other_start)
    assert not processes.is_ours(other_argv)
    assert processes.stop(other_start) == "not running"
    assert processes.stop(other_argv) == "not running"
    assert sleeper.poll() is None, "a process that is not ours was signalled"


def test_stop_terminates_and_reports(layout: RunLayout, sleeper: subprocess.Popen[bytes]) -> None:
    [record] = processes.read_records(layout)
    assert processes.stop(record, timeout=5) == "stopped"
    assert processes.read_stat(sleeper.pid) is None  # gone and reaped
    assert not processes.is_ours(record)
    assert processes.stop(record) == "not running"


def test_stop_kills_a_process_that_ignores_sigterm_and_its_session(layout: RunLayout) -> None:
    # The leader ignores SIGTERM and leaves a child behind in its session.
    code = (
        "import signal, subprocess, time\n"
        "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
        "child = subprocess.Popen(['sleep', '60'])\n"
        "print(child.pid, flush=True)\n"
        "time.sleep(60)\n"
    )
    argv = [sys.executable, "-c", code]
    proc = processes.start_daemon(layout, "stubborn", argv, dict(os.environ))
    out_path = layout.output_log("stubborn")
    child_pid = 0
    for _ in range(100):
        text = out_path.read_text().strip()
        if text:
            child_pid = int(text)
            break
        subprocess.run(["sleep", "0.05"], check=True)
    assert child_pid
    [record] = processes.read_records(layout)
    assert processes.stop(record, timeout=0.5) == "killed"
    assert processes.read_stat(proc.pid) is None  # gone and reaped
    for _ in range(100):
        stat = processes.read_stat(child_pid)
        if stat is None or stat.state == "Z":
            break
        subprocess.run(["sleep", "0.05"], check=True)
    stat = processes.read_stat(child_pid)
    assert stat is None or stat.state == "Z", "the session's child survived"


def test_unreadable_records_are_skipped(layout: RunLayout) -> None:
    (layout.pid_dir / "broken.pid").write_text("{not json")
    assert processes.read_records(layout) == []


def test_ports_in_use_are_detected() -> None:
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        port = listener.getsockname()[1]
        assert not port_is_free(port)
        assert busy_ports([port]) == [port]
        assert connectable(port)
    assert port_is_free(port)


def test_find_free_port_block_skips_busy_ports() -> None:
    base = find_free_port_block(3, start=41000, stop=42000)
    with socket.socket() as listener:
        listener.bind(("0.0.0.0", base + 1))
        listener.listen()
        again = find_free_port_block(3, start=base, stop=42000)
    assert again > base + 1
    assert busy_ports(list(range(again, again + 3))) == []


def test_leftovers_of_a_dead_daemon_are_cleaned_up(layout: RunLayout) -> None:
    # The leader exits at once, leaving a child in its session (like slurmscriptd).
    code = "import subprocess\nprint(subprocess.Popen(['sleep', '60']).pid, flush=True)\n"
    proc = processes.start_daemon(layout, "leaver", [sys.executable, "-c", code], dict(os.environ))
    proc.wait(timeout=10)
    child_pid = int(layout.output_log("leaver").read_text().strip())
    [record] = processes.read_records(layout)
    assert processes.stop(record) == "not running"
    for _ in range(100):
        stat = processes.read_stat(child_pid)
        if stat is None or stat.state == "Z":
            break
        subprocess.run(["sleep", "0.05"], check=True)
    stat = processes.read_stat(child_pid)
    assert stat is None or stat.state == "Z", "the dead daemon's child survived"
