"""Small persistent state: counter baselines per node, drain history per node, one lock.

Layout under the state dir (shared by all nodes on real sites):
``counters/<node>.json`` (error counters of the last run, with the boot id),
``history/<node>.json`` (clean-pass streak, gantry's own drains), ``policy.lock``.
Every write goes to a temp file and is renamed into place.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
from collections.abc import Iterator, Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from launcher.atomic_write import write_text
from launcher.preflight.context import Baseline
from launcher.site_config import SiteConfig


def state_dir(site: SiteConfig, env: Mapping[str, str] | None = None) -> Path:
    """preflight.state_dir, else $GANTRY_STATE_DIR, else <run_dir>/preflight."""
    environ = os.environ if env is None else env
    if site.preflight.state_dir:
        return Path(os.path.expandvars(os.path.expanduser(site.preflight.state_dir)))
    if environ.get("GANTRY_STATE_DIR"):
        return Path(environ["GANTRY_STATE_DIR"])
    run_dir = (
        site.slurm.run_dir
        or environ.get("GANTRY_RUN_DIR")
        or (f"/tmp/gantry-{site.slurm.cluster_name}")
    )
    return Path(run_dir) / "preflight"


def _safe(node: str) -> str:
    return "".join(c if c.isalnum() or c in "._-" else "_" for c in node) or "_"


def write_json_atomic(path: Path, data: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    write_text(path, json.dumps(data, indent=1, sort_keys=True), mode=0o600)


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def load_baseline(root: Path, node: str) -> Baseline | None:
    data = _read_json(root / "counters" / f"{_safe(node)}.json")
    if not isinstance(data, dict) or not isinstance(data.get("counters"), dict):
        return None
    counters = {str(k): int(v) for k, v in data["counters"].items() if isinstance(v, int)}
    boot = data.get("boot_id")
    return Baseline(boot_id=boot if isinstance(boot, str) else None, counters=counters)


def save_baseline(root: Path, node: str, baseline: Baseline) -> None:
    write_json_atomic(root / "counters" / f"{_safe(node)}.json", asdict(baseline))


@dataclass
class NodeHistory:
    """What the drain policy remembers about one node."""

    node: str
    """Slurm node name."""
    clean_passes: int = 0
    """Consecutive runs without a FAIL."""
    drained_by_gantry: bool = False
    """True while a drain gantry set is in force."""
    drain_reason: str | None = None
    """The reason gantry set."""
    drained_at: float | None = None
    """Epoch seconds of gantry's last drain of this node (for the rate limit)."""
    last_status: str | None = None
    """PASS/WARN/FAIL of the last run."""
    last_run: float | None = None
    """Epoch seconds of the last run."""


def load_history(root: Path, node: str) -> NodeHistory:
    data = _read_json(root / "history" / f"{_safe(node)}.json")
    if not isinstance(data, dict):
        return NodeHistory(node)
    fields = NodeHistory.__dataclass_fields__
    return NodeHistory(**{k: v for k, v in data.items() if k in fields and k != "node"}, node=node)


def save_history(root: Path, history: NodeHistory) -> None:
    write_json_atomic(root / "history" / f"{_safe(history.node)}.json", asdict(history))


def all_histories(root: Path) -> list[NodeHistory]:
    folder = root / "history"
    if not folder.is_dir():
        return []
    return [load_history(root, p.stem) for p in sorted(folder.glob("*.json"))]


@contextlib.contextmanager
def policy_lock(root: Path) -> Iterator[None]:
    """Serialise drain decisions of concurrent gates/health checks."""
    root.mkdir(parents=True, exist_ok=True)
    with open(root / "policy.lock", "a+", encoding="utf-8") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)
