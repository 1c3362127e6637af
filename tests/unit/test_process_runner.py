"""The bounded process runner: output, exit status, the watchdog, and a tool printing without
end (killed at the output cap, its memory bounded by it)."""

from __future__ import annotations

import sys

import pytest

from launcher import process_runner


def test_output_and_status_of_a_tool() -> None:
    done = process_runner.run_tool([sys.executable, "-c", "import sys; print('out'); "
                                    "print('err', file=sys.stderr); sys.exit(3)"], 30)
    assert (done.returncode, done.stdout, done.stderr) == (3, "out\n", "err\n")
    assert not done.ok and done.describe_failure().endswith("exited with status 3: err")


def test_a_tool_that_hangs_is_killed_at_the_timeout() -> None:
    done = process_runner.run_tool([sys.executable, "-c", "import time; print('x', flush=True); "
                                    "time.sleep(60)"], 1.0)
    assert done.timed_out and done.returncode is None and done.stdout == "x\n"
    assert 1.0 <= done.duration_s < 30


def test_a_tool_printing_without_end_is_killed_at_the_cap(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(process_runner, "MAX_TOOL_OUTPUT", 1 << 20)
    done = process_runner.run_tool([sys.executable, "-c", "import sys\nwhile True: "
                                    "sys.stdout.write('x' * 65536)"], 60)
    assert done.too_much and not done.timed_out and not done.ok
    assert (1 << 20) < len(done.stdout) <= (1 << 20) + (1 << 16)
    assert done.describe_failure().endswith(f"printed more than {1 << 20} bytes (killed)")


def test_a_tool_that_closes_its_output_and_keeps_running_is_killed_at_the_timeout() -> None:
    done = process_runner.run_tool(["sh", "-c", "echo hi; exec >&- 2>&-; sleep 60"], 1.0)
    assert done.timed_out and done.returncode is None and done.stdout == "hi\n"
    assert done.duration_s < 30
