"""The fabric test's record and its ring orders: what the rank program measures and prints.

Schema ``gantry.preflight.fabric`` version 1, one JSON line printed by rank 0 of the test
(launcher/preflight/fabric_rank.py): the nodes in rank order, the all-reduce's median time,
and per ring the order and each link's median time (a ping-pong: ``bytes`` from ``src`` to
``dst``, a 1-byte answer back). Parsing validates every field (typed_config), so a cut or
foreign record is a one-line error, never a traceback.

Ring orders (:func:`ring_orders`, positions in rank order): ring 1 is rank order, i -> i+1.
From 4 nodes on a second ring joins node pairs ring 1 does not: a slow node makes every link
it is on slow in both rings, a slow link between two healthy nodes only the one link, which
tells them apart (launcher/preflight/fabric_judge.py).
- 4 nodes: 0 2 1 3 (the two diagonals, plus two links of ring 1);
- odd n >= 5: stride 2 (0 2 4 ... 1 3 ...), no link shared with ring 1;
- even n >= 6: the even positions ascending, then 1, n-1, 3, 5, ..., n-3: an even-even or
  odd-odd pair is never adjacent in ring 1, and the two even-odd joins (n-2 -> 1,
  n-3 -> 0) are not either.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any

from launcher.errors import UserInputError
from launcher.typed_config import FieldError, from_mapping

SCHEMA = "gantry.preflight.fabric"
SCHEMA_VERSION = 1


def ring_orders(n: int) -> list[list[int]]:
    """The rings over ``n`` positions (none below 2; one up to 3 nodes; two from 4)."""
    if n < 2:
        return []
    first = list(range(n))
    if n <= 3:
        return [first]
    if n == 4:
        return [first, [0, 2, 1, 3]]
    if n % 2:
        return [first, [(2 * i) % n for i in range(n)]]
    evens = list(range(0, n, 2))
    odds = [1, n - 1, *range(3, n - 1, 2)]
    return [first, evens + odds]


@dataclass(frozen=True)
class LinkTime:
    """One timed link of a ring."""

    src: str
    """Node that sends ``bytes``."""
    dst: str
    """Node that receives them and answers with one byte."""
    seconds: float
    """Median time of the ping-pong over the repeats."""

    def validate(self) -> None:
        if not 0.0 <= self.seconds < float("inf"):
            raise FieldError("seconds", f"{self.seconds} is not allowed (expected >= 0)")


@dataclass(frozen=True)
class Ring:
    """One ring: its order and its links (order[i] -> order[i+1], the last back to the first)."""

    order: list[str]
    """Nodes in ring order."""
    links: list[LinkTime] = field(default_factory=list)
    """One per node, in ring order."""


@dataclass(frozen=True)
class FabricResult:
    """What one fabric test measured."""

    backend: str
    """mpi or nccl."""
    bytes: int
    """Bytes of the all-reduce and of each transfer."""
    repeats: int
    """Timed repetitions (medians are reported)."""
    nodes: list[str]
    """Nodes in rank order (one rank each)."""
    allreduce_s: float
    """Median all-reduce time."""
    rings: list[Ring] = field(default_factory=list)
    """The rings, ring 1 first."""
    duration_s: float = 0.0
    """Wall time of the test on rank 0, start-up included."""
    schema: str = SCHEMA
    """Always gantry.preflight.fabric."""
    version: int = SCHEMA_VERSION
    """Schema version."""

    def validate(self) -> None:
        if self.schema != SCHEMA:
            raise FieldError("schema", f"{self.schema!r} is not allowed (expected {SCHEMA!r})")
        if self.version != SCHEMA_VERSION:
            raise FieldError(
                "version", f"{self.version} is not supported (this gantry reads {SCHEMA_VERSION})")
        if len(set(self.nodes)) != len(self.nodes) or len(self.nodes) < 2:
            raise FieldError("nodes", f"{self.nodes!r} is not allowed (expected 2 or more "
                             "distinct nodes)")
        if not 0.0 <= self.allreduce_s < float("inf"):
            raise FieldError("allreduce_s", f"{self.allreduce_s} is not allowed (expected >= 0)")
        known = set(self.nodes)
        for i, ring in enumerate(self.rings):
            if sorted(ring.order) != sorted(self.nodes):
                raise FieldError(f"rings[{i}].order", "is not allowed (expected the nodes, "
                                 "each once)")
            for j, link in enumerate(ring.links):
                if link.src not in known or link.dst not in known or link.src == link.dst:
                    raise FieldError(f"rings[{i}].links[{j}]", f"{link.src}->{link.dst} is not "
                                     "allowed (expected two distinct nodes of the test)")

    def bus_bandwidth_gbps(self) -> float | None:
        """All-reduce bus bandwidth, nccl-tests' convention: 2 (n-1)/n x bytes / time."""
        n = len(self.nodes)
        if self.allreduce_s <= 0.0:
            return None
        return 2.0 * (n - 1) / n * self.bytes / self.allreduce_s / 1e9

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def result_from_json(text: str, source: str) -> FabricResult:
    """Validate one record (the last JSON line of ``text``); UserInputError naming ``source``."""
    lines = [line for line in text.splitlines() if line.lstrip().startswith("{")]
    if not lines:
        raise UserInputError(f"{source}: no fabric test record (the test printed none)")
    try:
        data = json.loads(lines[-1])
    except json.JSONDecodeError as err:
        raise UserInputError(f"{source}: not JSON ({err.msg} at column {err.colno})") from None
    except (ValueError, RecursionError):
        raise UserInputError(f"{source}: not a fabric test record") from None
    return from_mapping(FabricResult, data, source)
