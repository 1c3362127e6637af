"""The bucket coalescing of the overlapped data-parallel all-reduce (native/src/dp_buckets.c)
and its switches, through a small C driver compiled here with the real source files."""

from __future__ import annotations

import itertools
import os
import shutil
import subprocess
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

REPO = Path(__file__).resolve().parents[2]
SOURCES = [REPO / "tests" / "native" / "dp_buckets_driver.c",
           REPO / "native" / "src" / "dp_buckets.c", REPO / "native" / "src" / "env_flag.c",
           REPO / "native" / "src" / "runtime_config.c",
           REPO / "native" / "src" / "error.c"]


@pytest.fixture(scope="module")
def driver(tmp_path_factory: pytest.TempPathFactory) -> Path:
    compiler = shutil.which("cc") or shutil.which("gcc")
    if compiler is None:
        pytest.fail("a C compiler (cc) is required for this test")
    exe = tmp_path_factory.mktemp("dp-buckets") / "dp_buckets_driver"
    subprocess.run([compiler, "-std=c11", "-D_GNU_SOURCE", "-Wall", "-Wextra", "-Werror",
                    f"-I{REPO / 'native' / 'include'}", f"-I{REPO / 'native' / 'src'}",
                    *map(str, SOURCES), "-lm", "-o", str(exe)],
                   check=True, capture_output=True, text=True)
    return exe


def run(driver: Path, limit: int, target: int,
        ranges: list[tuple[int, int]]) -> tuple[list[tuple[int, int]], str]:
    """Buckets flushed (offset, count) and the last line ("ok" or "error ...")."""
    args = [str(driver), str(limit), str(target), *(f"{o}:{c}" for o, c in ranges)]
    out = subprocess.run(args, capture_output=True, text=True, check=False).stdout.splitlines()
    buckets = [(int(w[1]), int(w[2])) for w in (line.split() for line in out)
               if w[0] == "bucket"]
    return buckets, out[-1]


def test_stage_orders_make_the_documented_buckets(driver: Path) -> None:
    # a last stage: [wte 0:100][layer0 100:50][layer1 150:50][ln_f 200:10], backward order
    last = [(0, 100), (200, 10), (150, 50), (100, 50)]
    assert run(driver, 210, 1000, last) == ([(0, 100), (100, 110)], "ok")
    assert run(driver, 210, 60, last) == ([(0, 100), (150, 60), (100, 50)], "ok")
    assert run(driver, 210, 0, last) == ([(0, 100), (200, 10), (150, 50), (100, 50)], "ok")
    # a first stage: [wte 0:100][wpe 100:20][layer0 120:50][layer1 170:50]
    first = [(170, 50), (120, 50), (0, 120)]
    assert run(driver, 220, 1000, first) == ([(0, 220)], "ok")
    assert run(driver, 220, 100, first) == ([(120, 100), (0, 120)], "ok")


@pytest.mark.parametrize("ranges,message", [
    ([(0, 5), (5, 0)], "is empty or outside the buffer"),
    ([(0, 5), (8, 3)], "[8, 11) is empty or outside the buffer of 10"),
    ([(0, 5), (6, 4)], "reported 9 ready gradient elements of 10"),
    ([(0, 5), (5, 5), (0, 5)], "reported 15 ready gradient elements of 10"),
])
def test_bad_reports_fail(driver: Path, ranges: list[tuple[int, int]], message: str) -> None:
    _, last = run(driver, 10, 4, ranges)
    assert last.startswith("error ") and message in last


@st.composite
def reports(draw: st.DrawFn) -> tuple[int, int, list[tuple[int, int]]]:
    """A partition of [0, limit) into ranges, reported in a random order."""
    sizes = draw(st.lists(st.integers(1, 40), min_size=1, max_size=25))
    offsets = [sum(sizes[:i]) for i in range(len(sizes))]
    ranges = draw(st.permutations(list(zip(offsets, sizes, strict=True))))
    return sum(sizes), draw(st.integers(0, 120)), ranges


@settings(max_examples=60, deadline=None)
@given(reports())
def test_buckets_coalesce_consecutive_adjacent_reports(
    driver: Path, case: tuple[int, int, list[tuple[int, int]]]
) -> None:
    """Every bucket is a run of consecutive reports that are adjacent in the buffer; a bucket
    closes exactly when it reaches the target, when the next report is not adjacent, or at the
    end; together the buckets cover the buffer once."""
    limit, target, ranges = case
    buckets, last = run(driver, limit, target, ranges)
    assert last == "ok"
    i = 0
    for lo, count in buckets:
        cur_lo, cur_hi = ranges[i][0], ranges[i][0] + ranges[i][1]
        i += 1
        while (cur_lo, cur_hi - cur_lo) != (lo, count):
            assert cur_hi - cur_lo < target, "a full bucket was not flushed"
            o, c = ranges[i]
            assert o + c == cur_lo or o == cur_hi, "a bucket took a non-adjacent range"
            cur_lo, cur_hi = min(cur_lo, o), max(cur_hi, o + c)
            i += 1
        closes_early = i < len(ranges) and (ranges[i][0] + ranges[i][1] == cur_lo
                                            or ranges[i][0] == cur_hi)
        assert not closes_early or cur_hi - cur_lo >= target, "an open bucket was flushed"
    assert i == len(ranges)
    covered = sorted(buckets)
    assert covered[0][0] == 0 and all(a[0] + a[1] == b[0] for a, b in itertools.pairwise(covered))
    assert covered[-1][0] + covered[-1][1] == limit


@pytest.mark.parametrize("env,expected", [
    ({}, "overlap 1 elements 6553600"),
    ({"GANTRY_DP_OVERLAP": "0", "GANTRY_DP_BUCKET_MB": "0"}, "overlap 0 elements 0"),
    ({"GANTRY_DP_BUCKET_MB": "0.5"}, "overlap 1 elements 131072"),
    ({"GANTRY_DP_OVERLAP": "on"}, "error GANTRY_DP_OVERLAP='on' is not allowed (allowed: 0, 1)"),
    ({"GANTRY_DP_BUCKET_MB": "25MB"}, "error GANTRY_DP_BUCKET_MB='25MB' is not allowed"),
    ({"GANTRY_DP_BUCKET_MB": "nan"}, "error GANTRY_DP_BUCKET_MB='nan' is not allowed"),
])
def test_switches(driver: Path, env: dict[str, str], expected: str) -> None:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("GANTRY_DP_")}
    out = subprocess.run([str(driver), "--env"], capture_output=True, text=True, check=False,
                         env={**clean, **env}).stdout.strip()
    assert out.startswith(expected), out
