"""zb_native.c against its Python references: the list scheduler (every candidate, with and
without a bound, forked or not), the table builder (every schedule's orders), the makespan
(every schedule's table, several costs and bounds, bit for bit) and the whole zb-interleaved
search give the same results; without a C compiler the search runs in Python, warns once
and makes the same tables."""

from __future__ import annotations

import ctypes
import hashlib
from pathlib import Path

import numpy as np
import pytest

from launcher.schedules import SCHEDULES, Op, ScheduleError, compute_orders, generate, native
from launcher.schedules import zb_interleaved as zb
from launcher.schedules.simulator import UNIT_COSTS
from launcher.schedules.table import build_table
from launcher.schedules.timing import makespan

LAYOUTS = [(2, 1, 2), (2, 8, 2), (3, 4, 2), (3, 7, 3), (4, 9, 2), (5, 11, 2), (6, 13, 4),
           (8, 24, 2)]


@pytest.fixture(scope="module")
def lib() -> ctypes.CDLL:
    found = native.library()
    assert found is not None, native.unavailable_reason()
    return found


def _engines(pp: int, m: int, v: int, lib: ctypes.CDLL) -> tuple[zb._Engine, zb._Engine]:
    return zb._PythonEngine(pp, m, v), zb._NativeEngine(lib, pp, m, v)


def _as_bytes(orders: object) -> object:
    """Python orders as zb_native.c keeps them (bytes and None as they are)."""
    if not isinstance(orders, tuple):
        return orders
    return np.array([[int(op), s, mb] for order in orders for op, s, mb in order],
                    dtype=np.int32).tobytes()


@pytest.mark.parametrize("pp,m,v", LAYOUTS)
def test_greedy_runs_as_the_python_one(pp: int, m: int, v: int, lib: ctypes.CDLL) -> None:
    python, c = _engines(pp, m, v, lib)
    limit = zb.zb_interleaved_memory_cap(pp, v)
    full = python.run(python.start(), limit, 1, True, None, None)
    assert isinstance(full, tuple)
    price = makespan(zb._table(pp, m, v, full), zb.SELECT_COSTS)
    assert price is not None
    finished = 0
    for phase in (0, 1):
        for backward_first in (True, False):
            for cap in range(v, limit + 1):
                for bound in (None, price + 1e-3, price * 0.99):  # none, ties, cuts most
                    a = python.run(python.start(), cap, phase, backward_first, bound, None)
                    b = c.run(c.start(), cap, phase, backward_first, bound, None)
                    assert b == _as_bytes(a), (phase, backward_first, cap, bound)
                    finished += a is not None
    assert finished > 0


def _forked(engine: zb._Engine, phase: int, backward_first: bool) -> list[tuple[int, object]]:
    """(cap, orders as bytes) of each copy the trunk hands over, then (-1, the trunk's)."""
    got: list[tuple[int, object]] = []

    def fork(state: zb._State, parting: range, bound: float | None) -> float | None:
        for cap in reversed(parting):
            run = engine.run(state.copy(), cap, phase, backward_first, None, None)
            got.append((cap, _as_bytes(run)))
        return bound

    limit = zb.zb_interleaved_memory_cap(engine.pp, engine.v)
    trunk = engine.run(engine.start(), limit, phase, backward_first, None, fork)
    return [*got, (-1, _as_bytes(trunk))]


@pytest.mark.parametrize("pp,m,v", LAYOUTS)
def test_forked_runs_hand_over_the_same_states(pp: int, m: int, v: int,
                                                lib: ctypes.CDLL) -> None:
    python, c = _engines(pp, m, v, lib)
    for phase, backward_first in ((1, True), (0, False)):
        runs = _forked(c, phase, backward_first)
        assert runs == _forked(python, phase, backward_first)
        assert len(runs) > 1 or m < pp  # it forked (m = 1: no rank holds two)


@pytest.mark.parametrize("name", SCHEDULES)
@pytest.mark.parametrize("pp,m,v", [(2, 8, 2), (3, 5, 2), (4, 8, 3), (8, 16, 2)])
def test_table_rows_as_build_table(name: str, pp: int, m: int, v: int,
                                   lib: ctypes.CDLL) -> None:
    v = v if name in ("interleaved", "zb-interleaved") else 1
    if name == "interleaved" and m % pp:
        return  # interleaved needs pp | m
    orders = compute_orders(name, pp, m, v)
    made = native.rank_rows(lib, pp, v, m, [np.array([[int(op), s, mb] for op, s, mb in order],
                                                     dtype=np.int32) for order in orders])
    assert made is not None
    rows, slots = made
    reference = build_table(name, pp, v, m, orders)
    assert slots == reference.slots_per_stage
    for got, want in zip(rows, reference.rows, strict=True):
        assert np.array_equal(got, want)


def test_table_rows_refuse_a_stage_of_another_rank(lib: ctypes.CDLL) -> None:
    order = np.array([[int(Op.FORWARD), 1, 0]], dtype=np.int32)
    assert native.rank_rows(lib, 2, 1, 1, [order, order]) is None


COSTS = [UNIT_COSTS, zb.SELECT_COSTS,
         {Op.FORWARD: 0.7, Op.BACKWARD: 2.1, Op.BACKWARD_INPUT: 1.3, Op.WEIGHT: 0.9}]


@pytest.mark.parametrize("name", SCHEDULES)
@pytest.mark.parametrize("pp,m,v", [(2, 8, 2), (3, 7, 2), (4, 8, 3), (8, 16, 2)])
def test_makespan_bit_for_bit(name: str, pp: int, m: int, v: int, lib: ctypes.CDLL) -> None:
    v = v if name in ("interleaved", "zb-interleaved") else 1
    if name == "interleaved" and m % pp:
        return
    table = generate(name, pp, m, v)
    for costs in COSTS:
        exact = makespan(table, costs)
        assert exact is not None
        for bound in (None, exact, exact * (1 - 1e-9), exact * 0.5):
            status, found = native.makespan(lib, table, costs, bound)
            want = makespan(table, costs, bound)
            assert (found if status == native.DONE else None) == want, (costs, bound)
            assert status in (native.DONE, native.PAST)


def test_makespan_leaves_a_bad_table_to_the_reference(lib: ctypes.CDLL) -> None:
    table = generate("1f1b", 2, 4)
    cut = type(table)(table.name, table.pp, 1, table.micro_batches,
                      (table.rows[0], table.rows[1][:0]), table.slots_per_stage)
    assert native.makespan(lib, cut, UNIT_COSTS, None)[0] == native.ERROR
    with pytest.raises(ScheduleError, match="sends"):
        makespan(cut, UNIT_COSTS)


SEARCHES = [(pp, m, v) for pp in (2, 3, 4, 5, 6) for m in (1, pp - 1, pp + 1, 2 * pp + 1)
            for v in (2, 3)] + [(8, 64, 2), (8, 64, 4), (16, 64, 2)]


@pytest.mark.parametrize("pp,m,v", SEARCHES)
def test_search_makes_the_python_searchs_table(pp: int, m: int, v: int,
                                               lib: ctypes.CDLL) -> None:
    python, c = _engines(pp, m, v, lib)
    assert zb._search(c).to_bytes() == zb._search(python).to_bytes()


def test_without_a_compiler_python_makes_the_same_table(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str],
        lib: ctypes.CDLL) -> None:
    want = hashlib.sha256(generate("zb-interleaved", 8, 24, 2).to_bytes()).hexdigest()
    monkeypatch.setenv("GANTRY_BUILD_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("CC", "no-such-cc")
    native.library.cache_clear()
    zb._best_table.cache_clear()
    try:
        assert native.library() is None
        assert native.unavailable_reason() == (
            "no-such-cc: not found (install it or point CC at it)")
        table = generate("zb-interleaved", 8, 24, 2)
        assert hashlib.sha256(table.to_bytes()).hexdigest() == want
        warning = capsys.readouterr().err
        assert warning == ("warning: no-such-cc: not found (install it or point CC at it); "
                           "zb-interleaved searches in Python (the same tables, slower)\n")
    finally:
        native.library.cache_clear()
        zb._best_table.cache_clear()


def test_a_failing_compiler_is_one_line(monkeypatch: pytest.MonkeyPatch,
                                        tmp_path: Path) -> None:
    monkeypatch.setenv("GANTRY_BUILD_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("CC", "false")
    native.library.cache_clear()
    try:
        assert native.library() is None
        reason = native.unavailable_reason()
        assert reason is not None and reason.startswith("schedules: ")
        assert "zb_native.c" in reason and "\n" not in reason
        assert not list((tmp_path / "cache").rglob("*.so*"))  # nothing half-made left
    finally:
        native.library.cache_clear()


def test_compiles_into_the_build_cache(monkeypatch: pytest.MonkeyPatch,
                                       tmp_path: Path) -> None:
    monkeypatch.setenv("GANTRY_BUILD_CACHE", str(tmp_path / "cache"))
    native.library.cache_clear()
    try:
        assert native.library() is not None
        built = list((tmp_path / "cache").glob("schedules-*/*"))
        assert [p.name for p in built] == [native.LIBRARY_NAME]
    finally:
        native.library.cache_clear()
