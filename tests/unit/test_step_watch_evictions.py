"""step-watch stopping a command job's step on an eviction, with real child processes standing
in for srun: TERM once a node was asked to leave, KILL after the stop grace, exit
TRAINER_EVICTED; without --stop-on-eviction (gantry's trainer) nothing is stopped."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from launcher.job_exit_codes import TRAINER_EVICTED
from launcher.recovery import step_watch
from launcher.recovery.evictions import request_eviction
from launcher.recovery.step_watch import watch_step

REPO = Path(__file__).resolve().parents[2]

# The launcher's stand-in: says it is ready, waits until the eviction is there, then lingers
# LINGER seconds and exits 0 by itself. A TERM is recorded in `term` (and ends it, exit 0,
# as a program that saves on TERM would); with IGNORE it is recorded and the child goes on.
CHILD = """
import os, signal, sys, time
from pathlib import Path
out, linger, ignore = Path(sys.argv[1]), float(sys.argv[2]), sys.argv[3] == "ignore"
def on_term(signum, frame):
    (out / "term").write_text(str(os.getpid()))
    if not ignore:
        sys.exit(0)
signal.signal(signal.SIGTERM, on_term)
(out / "ready").write_text(str(os.getpid()))
while not (out / "attempt" / "evictions" / "n2.json").exists():
    time.sleep(0.01)
end = time.monotonic() + linger
while time.monotonic() < end:
    time.sleep(0.01)
sys.exit(0)
"""


def wait_file(path: Path, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        assert time.monotonic() < deadline, f"{path} did not appear"
        time.sleep(0.01)


@pytest.fixture
def evict_when_ready(tmp_path: Path) -> Iterator[None]:
    """Once the child is running, the node monitor of n2 asks that n2 leave the job."""

    def evict() -> None:
        wait_file(tmp_path / "ready")
        request_eviction(tmp_path / "attempt", "n2", "health", "gpu.xid: Xid 79",
                         {"check": "gpu.xid"}, what="health-xid-79")

    writer = threading.Thread(target=evict, daemon=True)
    writer.start()
    yield
    writer.join(timeout=30)


@pytest.fixture(autouse=True)
def _fast_polls(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(step_watch, "POLL_S", 0.05)


def child(tmp_path: Path, linger: float, mode: str = "exit") -> list[str]:
    return [sys.executable, "-c", CHILD, str(tmp_path), str(linger), mode]


@pytest.mark.usefixtures("evict_when_ready")
def test_an_eviction_stops_a_command_step_with_term(tmp_path: Path,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    # The child would linger 20 s: only the TERM ends it sooner (and exits 0).
    rc = watch_step(child(tmp_path, 20), tmp_path / "attempt", grace_s=0.5,
                    stop_on_eviction=True, stop_grace_s=60)
    assert rc == TRAINER_EVICTED  # although the launcher itself exited 0
    assert (tmp_path / "term").read_text() == (tmp_path / "ready").read_text()
    said = capsys.readouterr().err
    assert "a node was asked to leave the job (n2 by the health check (gpu.xid: Xid 79))" \
        in said and "stopping the step (TERM, KILL after 60 s)" in said


@pytest.mark.usefixtures("evict_when_ready")
def test_a_launcher_that_outlives_the_stop_grace_is_killed(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rc = watch_step(child(tmp_path, 20, "ignore"), tmp_path / "attempt", grace_s=0.5,
                    stop_on_eviction=True, stop_grace_s=0.2)
    assert rc == TRAINER_EVICTED
    pid = int((tmp_path / "term").read_text())  # it got the TERM, ignored it ...
    with pytest.raises(ProcessLookupError):  # ... and is gone (killed and reaped)
        os.kill(pid, 0)
    assert "still running 0.2 s after TERM: killing it" in capsys.readouterr().err


@pytest.mark.usefixtures("evict_when_ready")
def test_without_the_flag_an_eviction_stops_nothing(tmp_path: Path) -> None:
    """gantry's trainer checkpoints on an eviction itself: step-watch leaves it running.
    The child lingers 40 polls after the eviction appeared and ends by itself."""
    rc = watch_step(child(tmp_path, 40 * step_watch.POLL_S), tmp_path / "attempt",
                    grace_s=0.5)
    assert rc == 0
    assert (tmp_path / "attempt" / "evictions" / "n2.json").is_file()
    assert not (tmp_path / "term").exists()


@pytest.mark.parametrize(("code", "stop", "expected"), [
    (1, True, TRAINER_EVICTED),  # crashed on the GPU the monitor saw go: the eviction's
    (143, True, TRAINER_EVICTED),
    (0, True, 0),  # finished: done, whatever is pending
    (1, False, 1),  # the trainer's own status stays its own
])
def test_a_step_that_ends_by_itself_while_an_eviction_is_pending(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, code: int, stop: bool,
        expected: int) -> None:
    monkeypatch.setattr(step_watch, "POLL_S", 60.0)  # the exit comes before any poll
    attempt = tmp_path / "attempt"
    request_eviction(attempt, "n2", "health", "gpu.inventory: GPU 0 gone", what="health-gpu0")
    argv = [sys.executable, "-c", f"import sys; sys.exit({code})"]
    assert watch_step(argv, attempt, grace_s=0.5, stop_on_eviction=stop) == expected


def test_no_eviction_keeps_the_launchers_status(tmp_path: Path) -> None:
    argv = [sys.executable, "-c", "import sys; sys.exit(3)"]
    assert watch_step(argv, tmp_path, grace_s=0.5, stop_on_eviction=True) == 3


def gantry(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.run([sys.executable, "-m", "launcher", *args], capture_output=True,
                          text=True, env=env, cwd=REPO, check=False, timeout=120)


@pytest.mark.usefixtures("evict_when_ready")
def test_the_command_exits_78_for_a_step_it_stopped(tmp_path: Path) -> None:
    done = gantry("step-watch", "--attempt-dir", str(tmp_path / "attempt"), "--stop-on-eviction",
                  "--stop-grace", "30", "--", *child(tmp_path, 20))
    assert done.returncode == TRAINER_EVICTED, done.stderr
    assert (tmp_path / "term").is_file()
    assert "gantry step-watch: a node was asked to leave the job" in done.stderr


@pytest.mark.parametrize(("args", "message"), [
    (["--stop-grace", "5"], "--stop-grace: allowed only with --stop-on-eviction"),
    (["--stop-on-eviction", "--stop-grace", "-1"], "--stop-grace: -1 is not allowed"),
    (["--stop-on-eviction", "--stop-grace", "nan"], "--stop-grace: nan is not allowed"),
])
def test_bad_stop_grace_is_one_line(tmp_path: Path, args: list[str], message: str) -> None:
    done = gantry("step-watch", "--attempt-dir", str(tmp_path), *args, "--", "true")
    assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stderr
    assert done.stderr.startswith("error: ") and message in done.stderr, done.stderr


# A launcher that outlives a first TERM: the second one (srun's "end the step") ends it.
TWO_TERMS = """
import signal, sys, time
from pathlib import Path
out = Path(sys.argv[1])
terms = []
def on_term(signum, frame):
    terms.append(signum)
    (out / "terms").write_text(str(len(terms)))
    if len(terms) == 2:
        sys.exit(0)
signal.signal(signal.SIGTERM, on_term)
(out / "ready").write_text("1")
while True:
    time.sleep(0.01)
"""


@pytest.mark.parametrize(("name", "ended_by"), [("srun", "its own exit"), ("mpirun", "KILL")])
def test_a_launcher_past_its_grace_is_ended_srun_through_a_term(
        tmp_path: Path, name: str, ended_by: str) -> None:
    """Past the grace, srun gets TERM itself (it has Slurm kill its tasks on every node, which
    a SIGKILLed srun would leave running) and KILL only if that does not end it; another
    launcher is killed at once."""
    script = tmp_path / name
    script.write_text(f"#!{sys.executable}\n{TWO_TERMS}")
    script.chmod(0o755)
    child = subprocess.Popen([str(script), str(tmp_path)])
    wait_file(tmp_path / "ready")
    child.send_signal(signal.SIGTERM)  # the TERM step-watch sends on an eviction
    wait_file(tmp_path / "terms")
    step_watch._end_launcher([str(script)], child)
    if ended_by == "KILL":
        assert child.returncode == -signal.SIGKILL
        assert (tmp_path / "terms").read_text() == "1"
    else:
        assert child.returncode == 0 and (tmp_path / "terms").read_text() == "2"
