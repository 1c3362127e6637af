"""The gantry log line reader: its UTC clock arithmetic against the standard library's
(``calendar.timegm`` of ``time.strptime``) over every valid calendar time, out-of-range parts
refused as strptime refuses them, and the markers of a requeued log."""

from __future__ import annotations

import calendar
import time

from hypothesis import given
from hypothesis import strategies as st

from launcher.report.log_markers import log_marks, parse_line, utc_seconds


@given(st.integers(1, 9999), st.integers(0, 13), st.integers(0, 32), st.integers(0, 25),
       st.integers(0, 61), st.integers(0, 62))
def test_utc_seconds_is_timegm_of_strptime(year: int, month: int, day: int, hour: int,
                                           minute: int, second: int) -> None:
    text = f"{year:04d}-{month:02d}-{day:02d}T{hour:02d}:{minute:02d}:{second:02d}"
    try:
        expected: int | None = calendar.timegm(time.strptime(text, "%Y-%m-%dT%H:%M:%S"))
    except ValueError:
        expected = None
    assert utc_seconds(year, month, day, hour, minute, second) == expected


def test_line_time_keeps_the_fraction_and_refuses_impossible_dates() -> None:
    assert parse_line("[gantry 2026-12-03T16:29:28.25Z] launching the step") == (
        1796315368.25, "launching the step")
    assert parse_line("[gantry 2024-02-29T00:00:00Z] leap day") == (1709164800.0, "leap day")
    assert parse_line("[gantry 2025-02-29T00:00:00Z] no leap day") is None
    assert parse_line("[gantry 2026-13-01T00:00:00Z] month 13") is None


def test_markers_follow_the_restart_of_a_requeued_log() -> None:
    lines = ["[gantry 2026-12-03T10:00:00Z] job 7 (restart 0 of 3) on n[1-2]",
             "[gantry 2026-12-03T10:00:01Z] preflight on n[1-2]",
             "[gantry 2026-12-03T10:00:05Z] preflight step finished",
             "[gantry 2026-12-03T10:00:06Z] launching 2 ranks",
             "[gantry 2026-12-03T10:01:00Z] requeueing after node failure",
             "not a gantry line",
             "[gantry 2026-12-03T10:02:00Z] job 7 (restart 1 of 3) on n[2-3]",
             "[gantry 2026-12-03T10:03:00Z] training finished"]
    marks = [(mark.restart, mark.marker) for mark in log_marks(lines)]
    assert marks == [(0, "start"), (0, "preflight"), (0, "gate"), (0, "launch"), (0, "end"),
                     (1, "start"), (1, "end")]
