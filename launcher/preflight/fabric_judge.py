"""The fabric verdict: which links are slow, and whether a slow node or a slow link explains it.

Pure: a FabricResult (launcher/preflight/fabric_result.py) and the site's
``preflight.fabric`` settings in, a FabricVerdict out.

1. Links are undirected node pairs; a pair timed in both rings keeps its slower time.
2. Reference: the median over nodes of each node's fastest link. A slow node makes all of
   its links slow, so in a 3-node test two of the three links are slow and the median link
   would be a slow one; each healthy node still has a fast link.
3. A link is slow when its time exceeds ``slow_link_ratio`` x the reference and the
   reference by ``slow_link_excess_ms`` (noise floor), or its bandwidth is under
   ``min_link_gbps`` (when set; the only judgement of a 2-node test: one link has no peers
   to compare with).
4. A slow node: every one of its links is slow, and it has at least two (a node of a 2-node
   test has one: the link is named instead). Slow links not on a slow node are slow links:
   both of their nodes are named, the fault may sit at either end.
5. The all-reduce's bus bandwidth under ``min_busbw_gbps`` (when set) fails the fabric; when
   no link is slow there is no node to name and nothing is excluded (FAIL, unattributed).
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from typing import Any, Literal

from launcher.preflight.drain_reason import DRAIN_PREFIX
from launcher.preflight.fabric_result import FabricResult
from launcher.site_config import FabricSection

FabricStatus = Literal["PASS", "FAIL", "ERROR"]


@dataclass(frozen=True)
class JudgedLink:
    """One node pair as judged."""

    a: str
    """First node (in rank order)."""
    b: str
    """Second node."""
    seconds: float
    """Its time (the slower of its rings' times)."""
    gbps: float
    """bytes / seconds, in GB/s."""
    slow: bool
    """Judged slow."""


@dataclass(frozen=True)
class FabricVerdict:
    """What the fabric test says about the nodes it ran on."""

    status: FabricStatus
    """PASS; FAIL (a slow node or link, or the all-reduce under its minimum); ERROR (no
    usable result: nothing is judged, nobody is excluded)."""
    message: str
    """One line for the log."""
    culprits: dict[str, str] = field(default_factory=dict)
    """Node -> drain reason, for the nodes the verdict excludes."""
    slow_nodes: list[str] = field(default_factory=list)
    """Nodes all of whose links are slow."""
    slow_links: list[tuple[str, str]] = field(default_factory=list)
    """Slow links on no slow node."""
    busbw_gbps: float | None = None
    """All-reduce bus bandwidth."""
    reference_s: float | None = None
    """The reference link time (step 2 of the module docstring)."""
    links: list[JudgedLink] = field(default_factory=list)
    """Every measured node pair."""
    nodes: list[str] = field(default_factory=list)
    """Nodes the test ran on."""

    def to_dict(self) -> dict[str, Any]:
        return {
            "status": self.status, "message": self.message, "culprits": self.culprits,
            "slow_nodes": self.slow_nodes, "slow_links": [list(p) for p in self.slow_links],
            "busbw_gbps": _round(self.busbw_gbps), "reference_s": _round(self.reference_s, 6),
            "nodes": self.nodes,
            "links": [{"a": x.a, "b": x.b, "seconds": round(x.seconds, 6),
                       "gbps": round(x.gbps, 3), "slow": x.slow} for x in self.links],
        }


def _round(value: float | None, digits: int = 3) -> float | None:
    return None if value is None else round(value, digits)


def error_verdict(why: str) -> FabricVerdict:
    """The verdict of a test that gave no usable result."""
    return FabricVerdict("ERROR", f"fabric test gave no result ({why}): not judged, "
                         "no node excluded")


def _pairs(result: FabricResult) -> dict[tuple[str, str], float]:
    rank = {n: i for i, n in enumerate(result.nodes)}
    times: dict[tuple[str, str], float] = {}
    for ring in result.rings:
        for link in ring.links:
            key = (link.src, link.dst) if rank[link.src] < rank[link.dst] else (link.dst,
                                                                                 link.src)
            times[key] = max(times.get(key, 0.0), link.seconds)
    return times


def _reference(times: dict[tuple[str, str], float], nodes: list[str]) -> float:
    fastest = [min(t for pair, t in times.items() if node in pair) for node in nodes
               if any(node in pair for pair in times)]
    return statistics.median(fastest)


def judge(result: FabricResult, cfg: FabricSection) -> FabricVerdict:
    """The verdict on ``result`` under the site's settings (see the module docstring)."""
    times = _pairs(result)
    busbw = result.bus_bandwidth_gbps()
    if not times:
        return FabricVerdict("ERROR", "fabric test timed no link: not judged, no node excluded",
                             busbw_gbps=busbw, nodes=list(result.nodes))
    ref = _reference(times, result.nodes)
    links = []
    for (a, b), seconds in times.items():
        gbps = result.bytes / seconds / 1e9 if seconds > 0 else float("inf")
        relative = (len(times) >= 3 and seconds > cfg.slow_link_ratio * ref
                    and seconds - ref >= cfg.slow_link_excess_ms / 1000.0)
        absolute = cfg.min_link_gbps > 0 and gbps < cfg.min_link_gbps
        links.append(JudgedLink(a, b, seconds, gbps, relative or absolute))
    slow_nodes = [n for n in result.nodes
                  if len(mine := [x for x in links if n in (x.a, x.b)]) >= 2
                  and all(x.slow for x in mine)]
    slow_links = [(x.a, x.b) for x in links
                  if x.slow and x.a not in slow_nodes and x.b not in slow_nodes]
    culprits: dict[str, str] = {}
    for node in slow_nodes:
        mine = [x for x in links if node in (x.a, x.b)]
        factor = min(x.seconds for x in mine) / ref if ref > 0 else float("inf")  # >= ratio
        culprits[node] = f"{DRAIN_PREFIX}fabric.node:links-{_factor(factor)}x-slower"
    for a, b in slow_links:
        for node in (a, b):
            culprits.setdefault(node, f"{DRAIN_PREFIX}fabric.link:{a}-{b}-slow")
    low_busbw = cfg.min_busbw_gbps > 0 and busbw is not None and busbw < cfg.min_busbw_gbps
    measured = (f"all-reduce {_size(result.bytes)} busbw {busbw or 0:.3g} GB/s, "
                f"{len(links)} links, reference {ref * 1000:.3g} ms")
    if not culprits and not low_busbw:
        message = f"fabric PASS on {len(result.nodes)} nodes: {measured}"
    else:
        named = [f"slow node {n} ({_node_links(links, n, ref)})" for n in slow_nodes]
        named += [f"slow link {a}-{b} ({_link(links, a, b)})" for a, b in slow_links]
        if low_busbw:
            named.append(f"bus bandwidth {busbw or 0:.3g} GB/s < min {cfg.min_busbw_gbps:g}"
                         + ("" if culprits else ", no node or link to blame: nothing excluded"))
        message = f"fabric FAIL: {'; '.join(named)}; {measured}"
    return FabricVerdict("FAIL" if culprits or low_busbw else "PASS", message, culprits,
                         slow_nodes, slow_links, busbw, ref, links, list(result.nodes))


def _node_links(links: list[JudgedLink], node: str, ref: float) -> str:
    mine = [x for x in links if node in (x.a, x.b)]
    fastest = min(x.seconds for x in mine)
    return (f"all {len(mine)} of its links slow, the fastest {fastest * 1000:.3g} ms = "
            f"{_factor(fastest / ref if ref > 0 else float('inf'))}x the reference")


def _link(links: list[JudgedLink], a: str, b: str) -> str:
    x = next(x for x in links if (x.a, x.b) == (a, b))
    return f"{x.seconds * 1000:.3g} ms, {x.gbps:.3g} GB/s"


def _factor(value: float) -> str:
    return "inf" if value == float("inf") else f"{value:.1f}"


def _size(nbytes: int) -> str:
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if nbytes >= scale and nbytes % scale == 0:
            return f"{nbytes // scale} {unit}"
    return f"{nbytes} B"
