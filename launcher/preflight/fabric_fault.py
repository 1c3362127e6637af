"""The fabric test's fault-injection hook, for tests only (real users never set it).

``GANTRY_FAULT_SLOW_FABRIC=NODE:SECONDS``: the rank of the gate's fabric test that runs on
node NODE (``$SLURMD_NODENAME``) sleeps SECONDS before each transfer it takes part in: before
sending a link's data or its answer, and before each all-reduce. Every link on NODE is then
slower by SECONDS per repetition, as if its network port were slow. Unlike the trainer's
hooks (launcher/train/faults.py) it fires on every test, not once per job: it stands for a
node that stays slow. A malformed value is a one-line error naming the variable (exit 2).
"""

from __future__ import annotations

import math
import os

from launcher.errors import UserInputError

SLOW_FABRIC = "GANTRY_FAULT_SLOW_FABRIC"


def parse_node_delay(variable: str, value: str) -> tuple[str, float]:
    """A ``NODE:SECONDS`` fault hook's value (``variable`` names it in the error) -> (node,
    seconds), SECONDS in 0..3600 after the last colon; anything else is a UserInputError.
    The fabric hook here and the trainer's GANTRY_FAULT_SLOW_NODE both read theirs so."""
    node, sep, seconds = value.rpartition(":")
    try:
        delay = float(seconds) if sep and node else -1.0
    except ValueError:
        delay = -1.0
    if not (math.isfinite(delay) and 0.0 <= delay <= 3600.0):
        raise UserInputError(f"{variable}: {value!r} is not allowed (expected NODE:SECONDS, "
                             "SECONDS in 0..3600)")
    return node, delay


def parse_slow_fabric(value: str) -> tuple[str, float]:
    """``NODE:SECONDS`` -> (node, seconds); anything else is a UserInputError."""
    return parse_node_delay(SLOW_FABRIC, value)


def slow_fabric_delay(node: str) -> float:
    """Seconds this node's transfers are delayed (0 when the hook is unset or names another)."""
    value = os.environ.get(SLOW_FABRIC)
    if not value:
        return 0.0
    target, delay = parse_slow_fabric(value)
    return delay if target == node else 0.0
