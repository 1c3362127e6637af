"""Benchmark: parse a 27,500-node topology and place a 4,096-node job on it (targets: < 1 s each).

Also a topology.conf whose one Nodes= list names all 27,500 nodes on one line (the tokenizer).

Run from the repository root:  python bench/bench_topology.py
Prints a markdown table for docs/BENCHMARKS.md. The anchor (sorting 1M floats with Python's
sorted) is measured in the same run so that numbers from different machines compare.
"""

from __future__ import annotations

import platform
import random
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from topology.build import build_topology
from topology.conf_format import load_topology_conf
from topology.model import Topology
from topology.placement import (
    ClusterState,
    PlacementRequest,
    SlurmVersion,
    plan_placement,
)
from topology.synthetic import SITE_NODES, fat_tree_conf, node_name, nvl72_conf

REPEATS = 5


def parse_site(path: Path, names: list[str]) -> Topology:
    """The site's topology from its topology.conf at path."""
    return build_topology(load_topology_conf(path), names)


def timed(func: Callable[[], object]) -> tuple[float, object]:
    """Median seconds over REPEATS runs, and the last result."""
    times: list[float] = []
    result: object = None
    for _ in range(REPEATS):
        start = time.perf_counter()
        result = func()
        times.append(time.perf_counter() - start)
    return statistics.median(times), result


def main() -> int:
    names = [node_name(i) for i in range(1, SITE_NODES + 1)]
    rng = random.Random(4)
    busy = set(rng.sample(names, SITE_NODES // 5))  # 20% of the cluster busy
    unhealthy = set(rng.sample(sorted(set(names) - busy), 100))
    state = ClusterState.of([n for n in names if n not in busy], unhealthy)
    request = PlacementRequest(nodes=4096, spares=16, pp=8, dp=4096, gpus_per_node=8)
    request.validate()
    rows: list[tuple[str, float]] = []
    anchor_data = [rng.random() for _ in range(1_000_000)]
    anchor, _ = timed(lambda: sorted(anchor_data))
    rows.append(("anchor: sorted() of 1M floats", anchor))
    with tempfile.TemporaryDirectory() as tmp:
        for label, text, version in (
            ("3-level fat tree (860 leaves of 32)", fat_tree_conf(), "22.05.8"),
            ("NVL72 blocks (3,055 blocks of 9)", nvl72_conf(), "24.11.1"),
        ):
            path = Path(tmp) / "topology.conf"
            path.write_text(text)
            parse_s, topo = timed(partial(parse_site, path, names))
            assert isinstance(topo, Topology)
            place_s, plan = timed(
                partial(plan_placement, topo, request, state, SlurmVersion.parse(version))
            )
            rows.append((f"parse {label}, {SITE_NODES} nodes", parse_s))
            rows.append((f"place 4,096+16 nodes on {label}", place_s))
            spanned = len(plan.spanned)  # type: ignore[attr-defined]
            bound = plan.lower_bound  # type: ignore[attr-defined]
            print(f"# {label}: spans {spanned}, lower bound {bound}", file=sys.stderr)
        # the tokenizer's worst case: every node by name in one Nodes= list on one line
        path = Path(tmp) / "one-line.conf"
        path.write_text(f"SwitchName=all Nodes={','.join(names)}\n")
        parse_s, _ = timed(partial(parse_site, path, names))
        rows.append((f"parse one leaf listing {SITE_NODES} names on one line", parse_s))
    print(
        f"date: {time.strftime('%Y-%m-%d')}, Python {platform.python_version()}, "
        f"{platform.machine()}, {platform.processor() or platform.platform()}"
    )
    print("| measurement | median of 5 (s) | target |")
    print("|---|---|---|")
    for label, seconds in rows:
        target = "< 1 s" if not label.startswith("anchor") else "-"
        print(f"| {label} | {seconds:.3f} | {target} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
