"""Schedule tables proven by the simulator: dependencies, matching, no deadlock, bubble, memory."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from launcher.schedules import Action, Op, ScheduleError, generate, simulate, table_from_bytes
from launcher.schedules.table import ScheduleTable, build_table


def expected_bubble(name: str, pp: int, m: int, v: int) -> float:
    if name == "interleaved":
        return (pp - 1) / (v * m + pp - 1)
    if name == "zb-h1":
        return (pp - 1) / (3 * m + pp - 1)
    return (pp - 1) / (m + pp - 1)


@settings(max_examples=60, deadline=None)
@given(pp=st.integers(1, 8), m=st.integers(1, 24))
def test_gpipe_and_1f1b_bubble_and_memory(pp: int, m: int) -> None:
    gpipe = simulate(generate("gpipe", pp, m))
    one = simulate(generate("1f1b", pp, m))
    assert gpipe.bubble_fraction == pytest.approx(expected_bubble("gpipe", pp, m, 1))
    assert one.bubble_fraction == pytest.approx(expected_bubble("1f1b", pp, m, 1))
    assert max(gpipe.peak_in_flight) == m
    assert max(one.peak_in_flight) == min(pp, m)
    assert one.peak_in_flight == [min(pp - r, m) for r in range(pp)]


@settings(max_examples=40, deadline=None)
@given(pp=st.integers(2, 6), groups=st.integers(1, 4), v=st.integers(2, 4))
def test_interleaved_bubble(pp: int, groups: int, v: int) -> None:
    m = pp * groups
    result = simulate(generate("interleaved", pp, m, v))
    assert result.bubble_fraction == pytest.approx(expected_bubble("interleaved", pp, m, v))


@settings(max_examples=40, deadline=None)
@given(pp=st.integers(2, 8), extra=st.integers(0, 16))
def test_zb_h1_bubble_is_a_third_of_1f1b(pp: int, extra: int) -> None:
    m = pp + extra
    zb = simulate(generate("zb-h1", pp, m))
    one = simulate(generate("1f1b", pp, m))
    assert zb.bubble_fraction == pytest.approx(expected_bubble("zb-h1", pp, m, 1))
    # (3m + 3p - 3) / (3 (3m + p - 1)) of 1F1B's: below a half at m = pp, -> 1/3 as m grows
    assert zb.bubble_fraction < 0.5 * one.bubble_fraction
    if m >= 4 * pp:
        assert zb.bubble_fraction < 0.4 * one.bubble_fraction
    assert max(zb.peak_in_flight) == pp


@pytest.mark.parametrize("pp,m", [(2, 1), (4, 2), (8, 3)])
def test_zb_h1_short_step_is_still_valid_and_no_worse(pp: int, m: int) -> None:
    zb = simulate(generate("zb-h1", pp, m))
    assert zb.bubble_fraction <= simulate(generate("1f1b", pp, m)).bubble_fraction


def test_interleaved_rejects_m_not_multiple_of_pp() -> None:
    with pytest.raises(ScheduleError, match=r"micro_batches\(6\) must be a multiple of pp\(4\)"):
        generate("interleaved", 4, 6, 2)


def test_unknown_schedule_and_bad_virtual_stages() -> None:
    with pytest.raises(ScheduleError, match="unknown schedule"):
        generate("pipedream", 2, 2)
    with pytest.raises(ScheduleError, match="needs schedule 'interleaved'"):
        generate("1f1b", 2, 2, 2)


def test_table_round_trips_through_bytes() -> None:
    table = generate("interleaved", 2, 4, 2)
    again = table_from_bytes(table.to_bytes(), "interleaved")
    assert again.ranks == table.ranks
    assert again.slots_per_stage == table.slots_per_stage
    assert table.rank_array(1).shape == (len(table.ranks[1]), 5)
    with pytest.raises(ScheduleError, match="trailing"):
        table_from_bytes(table.to_bytes() + b"\0\0\0\0")


def test_every_wait_names_an_earlier_request() -> None:
    table = generate("zb-h1", 4, 8)
    for actions in table.ranks:
        for index, action in enumerate(actions):
            if action.op is Op.WAIT:
                assert 0 <= action.peer < index
                assert actions[action.peer].op in (
                    Op.SEND_ACT, Op.RECV_ACT, Op.SEND_GRAD, Op.RECV_GRAD
                )


# --- the simulator catches broken tables (each mutation must be rejected) ---

def _mutate(table: ScheduleTable, rank: int, actions: list[Action]) -> ScheduleTable:
    ranks = list(table.ranks)
    ranks[rank] = tuple(actions)
    return ScheduleTable.from_actions(table.name, table.pp, table.virtual_stages,
                                      table.micro_batches, ranks, table.slots_per_stage)


def test_simulator_detects_deadlock() -> None:
    # rank 0 wants mb 0's gradient before sending mb 1; rank 1 wants mb 1 before sending it
    orders = [
        [(Op.FORWARD, 0, 0), (Op.BACKWARD, 0, 0), (Op.FORWARD, 0, 1), (Op.BACKWARD, 0, 1)],
        [(Op.FORWARD, 1, 0), (Op.FORWARD, 1, 1), (Op.BACKWARD, 1, 0), (Op.BACKWARD, 1, 1)],
    ]
    with pytest.raises(ScheduleError, match="deadlock"):
        simulate(build_table("cyclic", 2, 1, 2, orders))


def test_simulator_detects_missing_dependency() -> None:
    table = generate("gpipe", 2, 2)
    actions = [a for a in table.ranks[1] if a.op is not Op.WAIT or
               table.ranks[1][a.peer].op is not Op.RECV_ACT]
    with pytest.raises(ScheduleError, match=r"has not arrived|not an unwaited"):
        simulate(_mutate(table, 1, actions))


def test_simulator_detects_mismatched_order() -> None:
    table = generate("gpipe", 2, 2)
    actions = list(table.ranks[0])
    sends = [i for i, a in enumerate(actions) if a.op is Op.SEND_ACT]
    i, j = sends[0], sends[1]
    actions[i] = dataclasses.replace(actions[i], micro_batch=1)
    with pytest.raises(ScheduleError):
        simulate(_mutate(table, 0, actions))
    del j


def test_simulator_detects_slot_clobbering() -> None:
    table = generate("gpipe", 1, 2)
    actions = [dataclasses.replace(a, slot=0) if a.op is Op.FORWARD else a
               for a in table.ranks[0]]
    with pytest.raises(ScheduleError, match="slot held by micro-batch 0"):
        simulate(_mutate(table, 0, actions))


def test_simulator_detects_missing_compute() -> None:
    table = generate("1f1b", 1, 2)
    actions = [a for a in table.ranks[0] if not (a.op is Op.BACKWARD and a.micro_batch == 1)]
    with pytest.raises(ScheduleError, match=r"backward of stage 0 mb 1 incomplete|holding"):
        simulate(_mutate(table, 0, actions))


# --- ZB-H2: deeper warm-up, bubble at the floor (pp - 1) F / ((pp - 1) F + m (F + B + W)) ---

GPU_LIKE = {Op.FORWARD: 1.0, Op.BACKWARD_INPUT: 1.3, Op.WEIGHT: 0.9, Op.BACKWARD: 2.2}
"""Op costs close to those measured on H200 (the input gradient dearer than the weight's)."""


def floor_bubble(pp: int, m: int, costs: dict[Op, float]) -> float:
    """No schedule does better: the last rank starts after pp - 1 forwards, then works."""
    f = costs[Op.FORWARD]
    return (pp - 1) * f / ((pp - 1) * f + m * (f + costs[Op.BACKWARD_INPUT] + costs[Op.WEIGHT]))


ZB_H2_CASES = sorted({(pp, m) for pp in (2, 3, 4) for m in (1, 2, 3, pp, 2 * pp, 8, 16)})


@pytest.mark.parametrize("pp,m", ZB_H2_CASES)
def test_zb_h2_is_valid_and_never_worse_than_zb_h1(pp: int, m: int) -> None:
    table = generate("zb-h2", pp, m)
    computes = [(a.op, a.stage, a.micro_batch) for actions in table.ranks for a in actions
                if a.op in (Op.FORWARD, Op.BACKWARD, Op.BACKWARD_INPUT, Op.WEIGHT)]
    expected = [(op, s, mb) for op in (Op.FORWARD, Op.BACKWARD_INPUT, Op.WEIGHT)
                for s in range(pp) for mb in range(m)]
    assert sorted(computes) == sorted(expected)  # one F, B and W per (stage, mb), no full B
    unit = simulate(table)  # raises on deadlock, a missing dependency or a mismatch
    assert unit.peak_in_flight == [min(m, 2 * pp - 1)] * pp
    assert max(table.slots_per_stage) <= min(m, 2 * pp - 1) + 1
    zb1 = simulate(generate("zb-h1", pp, m))
    assert unit.bubble_fraction <= zb1.bubble_fraction + 1e-12
    gpu = simulate(table, GPU_LIKE)
    zb1_gpu = simulate(generate("zb-h1", pp, m), GPU_LIKE)
    assert gpu.bubble_fraction <= zb1_gpu.bubble_fraction + 1e-12
    if m >= pp:  # both at the floor with equal op times
        assert unit.bubble_fraction == pytest.approx((pp - 1) / (3 * m + pp - 1))
    if m >= 2 * pp:  # zb-h2 stays at the floor when B > W; zb-h1 pays (pp-1)(F+B-W)
        assert gpu.bubble_fraction == pytest.approx(floor_bubble(pp, m, GPU_LIKE))
        zb1_loss = 1.4 * (pp - 1)
        assert zb1_gpu.bubble_fraction == pytest.approx(zb1_loss / (zb1_loss + 3.2 * m))
        assert gpu.bubble_fraction < zb1_gpu.bubble_fraction


@settings(max_examples=30, deadline=None)
@given(pp=st.integers(2, 6), extra=st.integers(0, 12),
       b=st.sampled_from([0.5, 0.7, 1.0, 1.3, 1.5, 2.0]),
       w=st.sampled_from([0.5, 0.7, 0.9, 1.0, 1.5, 2.0]))
def test_zb_h2_reaches_the_floor_for_m_at_least_2pp(pp: int, extra: int, b: float,
                                                    w: float) -> None:
    # the floor needs B <= 2 W (with B = 1.3, W = 0.5 the pp = 2 cool-down idles); zb-h2 is
    # never worse than zb-h1 either way
    m = 2 * pp + extra
    costs = {Op.FORWARD: 1.0, Op.BACKWARD_INPUT: b, Op.WEIGHT: w, Op.BACKWARD: b + w}
    zb2 = simulate(generate("zb-h2", pp, m), costs)
    zb1 = simulate(generate("zb-h1", pp, m), costs)
    if b <= 2 * w:
        assert zb2.bubble_fraction == pytest.approx(floor_bubble(pp, m, costs))
    assert zb2.bubble_fraction <= zb1.bubble_fraction + 1e-12


def test_zb_h2_pp2_m8_orders_and_numbers_of_the_docstring() -> None:
    table = generate("zb-h2", 2, 8)
    letter = {Op.FORWARD: "F", Op.BACKWARD_INPUT: "B", Op.WEIGHT: "W"}
    orders = [" ".join(f"{letter[a.op]}{a.micro_batch}" for a in actions if a.op in letter)
              for actions in table.ranks]
    assert orders == [
        "F0 F1 F2 B0 W0 B1 F3 B2 W1 F4 B3 W2 F5 B4 W3 F6 B5 W4 F7 B6 W5 W6 B7 W7",
        "F0 B0 F1 B1 F2 B2 W0 F3 B3 W1 F4 B4 W2 F5 B5 W3 F6 B6 W4 F7 B7 W5 W6 W7",
    ]
    assert simulate(table).bubble_fraction == pytest.approx(1 / 25)
    assert simulate(table, GPU_LIKE).bubble_fraction == pytest.approx(1 / 26.6)
    assert simulate(generate("zb-h1", 2, 8), GPU_LIKE).bubble_fraction == pytest.approx(1.4 / 27)
    assert simulate(generate("zb-h2", 4, 8), GPU_LIKE).bubble_fraction == pytest.approx(3 / 28.6)


def test_simulator_takes_each_ranks_own_costs() -> None:
    """A rank whose ops cost more sets the pace; the others wait for it (1f1b, pp=2, m=4)."""
    table = generate("1f1b", 2, 4)
    even = simulate(table)
    unit = {Op.FORWARD: 1.0, Op.BACKWARD: 2.0, Op.BACKWARD_INPUT: 1.0, Op.WEIGHT: 1.0}
    slow = {op: 1.2 * cost for op, cost in unit.items()}
    uneven = simulate(table, [slow, unit])
    assert simulate(table, [unit, unit]).makespan == even.makespan
    # rank 0 busy 1.2 x (4 x 3) = 14.4; rank 1 waits for every forward and backward of rank 0
    assert uneven.busy == pytest.approx([14.4, 12.0])
    assert uneven.makespan > even.makespan and uneven.makespan >= 14.4
    assert uneven.bubble_fraction > even.bubble_fraction
    with pytest.raises(ScheduleError, match="1 cost tables for pp=2"):
        simulate(table, [slow])
