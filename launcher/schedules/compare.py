"""Every schedule side by side for one layout, in theory: each one's table run on the abstract
machine (bubble, makespan, activations held per rank), and a text timeline of each rank."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from launcher.schedules import CHUNKED, SCHEDULES, ScheduleError, generate, simulate
from launcher.schedules.simulator import SimResult, with_unit_defaults
from launcher.schedules.table import Op

COST_KEYS = {"F": Op.FORWARD, "B": Op.BACKWARD_INPUT, "W": Op.WEIGHT}
"""The letters of ``--costs``: forward, backward to the input, weight gradient (a full
backward costs B + W)."""

_LETTER = {Op.FORWARD: "F", Op.BACKWARD: "B", Op.BACKWARD_INPUT: "B", Op.WEIGHT: "W"}


@dataclass(frozen=True)
class ScheduleRow:
    """One schedule's theory at one layout (``error`` set where the layout does not fit it)."""

    schedule: str
    virtual_stages: int
    bubble: float | None = None
    """Idle share of all ranks up to the makespan."""
    makespan: float | None = None
    """In the units of the costs."""
    peak_in_flight: tuple[int, ...] = ()
    """Per rank: most (chunk, micro-batch) activations it holds at once (a chunk is 1/v of
    the rank's layers)."""
    error: str | None = None
    result: SimResult | None = None


def parse_costs(text: str) -> dict[Op, float]:
    """``F=1,B=1.2,W=0.8`` -> the costs of the ops named (the others are left out); ValueError
    naming the part that is wrong."""
    costs: dict[Op, float] = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        key, _, value = part.partition("=")
        op = COST_KEYS.get(key.strip().upper())
        try:
            number = float(value)
        except ValueError:
            number = -1.0
        if op is None or not 0.0 < number < 1e9:
            raise ValueError(f"{part!r} is not allowed (expected F=, B= or W= a positive "
                             f"number, e.g. F=1,B=1,W=1)")
        costs[op] = number
    return costs


def split_full_backward(costs: Mapping[Op, float]) -> dict[Op, float]:
    """Costs measured on a schedule without the split backward have only the full backward:
    give B (input) and W half of it each, so the split schedules can be priced too."""
    out = dict(costs)
    if Op.BACKWARD in out and Op.BACKWARD_INPUT not in out and Op.WEIGHT not in out:
        out[Op.BACKWARD_INPUT] = out[Op.WEIGHT] = out[Op.BACKWARD] / 2
    return out


def compare(pp: int, micro_batches: int, virtual_stages: int,
            costs: Mapping[Op, float] | None = None) -> list[ScheduleRow]:
    """Each schedule at pp ranks and m micro-batches (the chunked ones with virtual_stages
    chunks per rank, the others with one). ScheduleError where pp or m is not positive."""
    if pp < 1 or micro_batches < 1 or virtual_stages < 2:
        raise ScheduleError(f"pp({pp}) and micro_batches({micro_batches}) must be >= 1, "
                            f"virtual_stages({virtual_stages}) >= 2")
    table_costs = with_unit_defaults(costs or {})
    rows = []
    for name in SCHEDULES:
        v = virtual_stages if name in CHUNKED else 1
        try:
            result = simulate(generate(name, pp, micro_batches, v), table_costs)
        except ScheduleError as err:
            rows.append(ScheduleRow(name, v, error=str(err)))
            continue
        rows.append(ScheduleRow(name, v, result.bubble_fraction, result.makespan,
                                tuple(result.peak_in_flight), result=result))
    return rows


def timeline(result: SimResult, width: int) -> list[str]:
    """One line per rank, ``width`` characters for the makespan: each compute as its letter
    (F, B, W) then its micro-batch's last digit, idle as '.'."""
    lines = []
    scale = width / result.makespan if result.makespan else 0.0
    for spans in result.spans:
        cells = ["."] * width
        for action, start, end in spans:
            first, last = round(start * scale), max(round(end * scale), round(start * scale) + 1)
            text = _LETTER[action.op] + str(action.micro_batch)[-1] * (last - first - 1)
            for i, char in enumerate(text[: max(0, min(last, width) - first)]):
                cells[first + i] = char
        lines.append("".join(cells))
    return lines
