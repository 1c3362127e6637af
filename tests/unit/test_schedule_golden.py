"""Every schedule's table is byte-for-byte the one the original generators made (a frozen
digest per layout, tests/golden/schedule_digests.json), and the fast makespan used to pick
zb-interleaved's candidate equals the simulator's bit for bit."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from launcher.schedules import Op, ScheduleError, generate, simulate
from launcher.schedules.simulator import UNIT_COSTS
from launcher.schedules.timing import makespan
from launcher.schedules.zb_interleaved import _GREEDY_COSTS, SELECT_COSTS, _greedy, _table

GOLDEN = Path(__file__).resolve().parents[1] / "golden" / "schedule_digests.json"
DIGESTS: dict[str, str] = json.loads(GOLDEN.read_text())["digests"]


def _digest(key: str) -> str:
    name, pp, m, v = key.split(":")
    try:
        return hashlib.sha256(generate(name, int(pp), int(m), int(v)).to_bytes()).hexdigest()
    except ScheduleError as err:
        return f"error: {err}"


def test_golden_covers_every_schedule() -> None:
    names = {key.split(":")[0] for key in DIGESTS}
    assert names == {"gpipe", "1f1b", "interleaved", "zb-h1", "zb-h2", "zb-interleaved"}
    assert len(DIGESTS) > 400


@pytest.mark.parametrize("name", ["gpipe", "1f1b", "interleaved", "zb-h1", "zb-h2",
                                  "zb-interleaved"])
def test_tables_match_the_frozen_digests(name: str) -> None:
    keys = [key for key in DIGESTS if key.split(":")[0] == name]
    wrong = [key for key in keys if _digest(key) != DIGESTS[key]]
    assert wrong == []


@pytest.mark.parametrize("pp,m,v", [(2, 8, 2), (3, 5, 2), (4, 8, 3)])
def test_fast_makespan_is_the_simulators(pp: int, m: int, v: int) -> None:
    costs = {Op.FORWARD: 1.0, Op.BACKWARD_INPUT: 1.3, Op.WEIGHT: 0.9, Op.BACKWARD: 2.2}
    checked = 0
    for cap in range(v, v * (2 * pp - 1) + 1):
        for backward_first in (True, False):
            orders = _greedy(pp, m, v, cap, _GREEDY_COSTS[1], backward_first)
            if orders is None:
                continue
            table = _table(pp, m, v, orders)
            for c in (SELECT_COSTS, UNIT_COSTS, costs):
                assert makespan(table, c) == simulate(table, c, spans=False).makespan
            checked += 1
    assert checked > 0
    for name in ("1f1b", "zb-h2"):
        table = generate(name, pp, m)
        assert makespan(table, UNIT_COSTS) == simulate(table).makespan


def test_fast_makespan_stops_at_the_bound() -> None:
    table = generate("1f1b", 4, 8)
    full = simulate(table).makespan
    assert makespan(table, UNIT_COSTS, bound=full + 1e-6) == full
    assert makespan(table, UNIT_COSTS, bound=full - 0.5) is None
