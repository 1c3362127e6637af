"""Small persistent state: counter baselines per node, drain history per node, one lock.

Layout under the state dir (shared by all nodes on real sites):
``counters/<node>.json`` (error counters of the last run, with the boot id),
``history/<node>.json`` (clean-pass streak, gantry's own drains), ``policy.lock``.
Every write goes to a temp file and is renamed into place, directories 0755 and records 0644
(its owner writes, jobs read: launcher/preflight/state_access.py).

Every record is checked field by field when read (types, finite numbers, the node the file
is named after). A bad one is renamed to ``<file>.bad-<UTC time>`` for the operator, with a
warning on stderr naming it, and the node is treated as having no history (or no baseline).
"""

from __future__ import annotations

import contextlib
import datetime
import fcntl
import json
import math
import os
import stat
import sys
from collections.abc import Iterator, Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from launcher.atomic_write import write_text
from launcher.errors import brief
from launcher.preflight.context import Baseline
from launcher.preflight.state_access import FILE_MODE, make_dirs
from launcher.site_config import LoadedSite

MAX_RECORD_BYTES = 1024 * 1024
"""Largest record read (a history record is ~300 bytes; a baseline of 8 GPUs x 18 NVLinks
x 4 counters ~40 KB)."""
MAX_COUNTER = 2**63 - 1
"""Largest error counter value (the tools report 64-bit counters)."""
STATUSES = ("PASS", "WARN", "FAIL")


def state_dir(site: LoadedSite, env: Mapping[str, str] | None = None) -> Path:
    """preflight.state_dir (~ and $VARS expanded, relative to the site file), else
    $GANTRY_STATE_DIR, else <the site's run dir>/preflight (LoadedSite.run_dir)."""
    environ = os.environ if env is None else env
    configured = site.config.preflight.state_dir
    if configured:
        return site.resolve(os.path.expandvars(os.path.expanduser(configured)))
    if environ.get("GANTRY_STATE_DIR"):
        return Path(environ["GANTRY_STATE_DIR"])
    return site.run_dir(environ) / "preflight"


def _safe(node: str) -> str:
    return "".join(c if c.isalnum() or c in "._-" else "_" for c in node) or "_"


def write_json_atomic(path: Path, data: Any) -> None:
    make_dirs(path.parent)
    write_text(path, json.dumps(data, indent=1, sort_keys=True), mode=FILE_MODE)


class BadRecord(ValueError):
    """A state record that is not what gantry writes (the message says which field)."""


def _read_record(path: Path) -> Any:
    """The JSON in ``path``; None when there is none; BadRecord when it is not a regular file
    of at most MAX_RECORD_BYTES of JSON (a FIFO, a link, a huge file, deep nesting)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    except OSError as err:
        raise BadRecord(f"cannot be read ({err.strerror}; a link or no regular file?)") from None
    with os.fdopen(fd, "rb") as handle:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise BadRecord("is not a regular file")
        data = handle.read(MAX_RECORD_BYTES + 1)
    if len(data) > MAX_RECORD_BYTES:
        raise BadRecord(f"is over {MAX_RECORD_BYTES} bytes")
    try:
        record = json.loads(data.decode("utf-8"), parse_constant=_no_constant)
    except RecursionError:
        raise BadRecord("is nested too deeply") from None
    except ValueError as err:  # not UTF-8, not JSON, NaN/Infinity, an int past 4,300 digits
        raise BadRecord(f"is not a JSON record ({brief(str(err), 100)[1:-1]})") from None
    if record is None:
        raise BadRecord("is null, not a JSON object")
    return record


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a finite number")


def _whole(data: Mapping[str, Any], key: str, high: int) -> int:
    value = data[key]
    if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value <= high:
        raise BadRecord(f"{key}: {brief(value)} is not allowed (expected an integer "
                        f"0..{high})")
    return value


def _time(data: Mapping[str, Any], key: str) -> float | None:
    value = data[key]
    if value is None:
        return None
    if isinstance(value, int | float) and not isinstance(value, bool):
        try:
            number = float(value)
        except OverflowError:
            number = math.inf
        if math.isfinite(number) and number >= 0:
            return number
    raise BadRecord(f"{key}: {brief(value)} is not allowed (expected epoch seconds, a finite "
                    "number >= 0, or null)")


def _text(data: Mapping[str, Any], key: str, allowed: tuple[str, ...] | None = None,
          ) -> str | None:
    value = data[key]
    if value is None or (isinstance(value, str) and len(value) <= 4096
                         and (allowed is None or value in allowed)):
        return value
    expected = f"one of {', '.join(allowed)}" if allowed else "a string"
    raise BadRecord(f"{key}: {brief(value)} is not allowed (expected {expected} or null)")


def _fields(data: Any, required: tuple[str, ...], node: str) -> Mapping[str, Any]:
    """``data`` as a record of node ``node`` with every ``required`` key (others ignored)."""
    if not isinstance(data, dict):
        raise BadRecord(f"is {brief(data, 40)}, not a JSON object")
    missing = [key for key in required if key not in data]
    if missing:
        raise BadRecord(f"has no {', '.join(missing)}")
    if "node" in data and data["node"] != node:
        raise BadRecord(f"node: {brief(data['node'], 64)} is not allowed (the file is "
                        f"node {brief(node, 64)}'s)")
    return data


def set_aside(path: Path, problem: str, consequence: str, allowed: bool = True) -> None:
    """Rename a bad record to ``<name>.bad-<UTC time>`` (kept for the operator) and say so on
    stderr; a process that may not change the state dir (``allowed`` False, or the rename
    fails) leaves it in place and says that."""
    stamp = datetime.datetime.now(datetime.UTC).strftime("%Y%m%dT%H%M%S.%fZ")
    target = path.with_name(f"{path.name}.bad-{stamp}")
    done = f"set aside as {target.name}"
    if not allowed:
        done = "left in place (this process only reads the state dir)"
    else:
        try:
            os.rename(path, target)
        except FileNotFoundError:
            done = "already gone (another run set it aside)"
        except OSError as err:
            done = f"left in place (cannot rename it: {err.strerror})"
    sys.stderr.write(f"warning: {path}: {problem}; {done}; {consequence}\n")


def _read_checked(path: Path, allowed: bool, consequence: str) -> Any:
    try:
        return _read_record(path)
    except BadRecord as err:
        set_aside(path, str(err), consequence, allowed)
        return None


def load_baseline(root: Path, node: str, set_aside_bad: bool = True) -> Baseline | None:
    """The counters the last run on ``node`` saved; None when there are none or the record
    is bad (set aside, see the module docstring)."""
    path = root / "counters" / f"{_safe(node)}.json"
    consequence = f"no counter baseline for {node} (counter growth is not checked this run)"
    data = _read_checked(path, set_aside_bad, consequence)
    if data is None:
        return None
    try:
        record = _fields(data, ("boot_id", "counters"), node)
        boot = _text(record, "boot_id")
        counters = record["counters"]
        if not isinstance(counters, dict):
            raise BadRecord(f"counters: {brief(counters, 40)} is not allowed (expected a "
                            "mapping of counter names to integers)")
        for key in counters:
            if len(key) > 256:
                raise BadRecord(f"counters: {brief(key, 40)} is not allowed (a counter name "
                                "of at most 256 characters)")
            _whole(counters, key, MAX_COUNTER)
    except BadRecord as err:
        set_aside(path, str(err), consequence, set_aside_bad)
        return None
    return Baseline(boot_id=boot, counters=dict(counters))


def save_baseline(root: Path, node: str, baseline: Baseline) -> None:
    write_json_atomic(root / "counters" / f"{_safe(node)}.json",
                      {"node": node, **asdict(baseline)})


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


HISTORY_KEYS = ("clean_passes", "drained_by_gantry", "drain_reason", "drained_at",
                "last_status", "last_run")


def _history(data: Any, node: str) -> NodeHistory:
    record = _fields(data, ("node", *HISTORY_KEYS), node)
    drained = record["drained_by_gantry"]
    if not isinstance(drained, bool):
        raise BadRecord(f"drained_by_gantry: {brief(drained)} is not allowed (expected true "
                        "or false)")
    return NodeHistory(
        node=node,
        clean_passes=_whole(record, "clean_passes", MAX_COUNTER),
        drained_by_gantry=drained,
        drain_reason=_text(record, "drain_reason"),
        drained_at=_time(record, "drained_at"),
        last_status=_text(record, "last_status", STATUSES),
        last_run=_time(record, "last_run"),
    )


def _checked_history(path: Path, node: str | None) -> NodeHistory | None:
    """The history in ``path``, of ``node`` (None: of the node its record names, which must be
    the node the file is named after); None when there is none or it is bad (set aside)."""
    consequence = f"{node or path.stem} is treated as having no history"
    data = _read_checked(path, True, consequence)
    if data is None:
        return None
    try:
        if node is None:
            name = data.get("node") if isinstance(data, dict) else None
            if not isinstance(name, str) or _safe(name) != path.stem:
                raise BadRecord(f"node: {brief(name, 64)} is not allowed (the file is named "
                                f"after node {brief(path.stem, 64)})")
            node = name
        return _history(data, node)
    except BadRecord as err:
        set_aside(path, str(err), consequence)
        return None


def load_history(root: Path, node: str) -> NodeHistory:
    """What the policy remembers about ``node``: its record, else (none, or a bad one, set
    aside) a fresh history."""
    return _checked_history(root / "history" / f"{_safe(node)}.json", node) or NodeHistory(node)


def save_history(root: Path, history: NodeHistory) -> None:
    write_json_atomic(root / "history" / f"{_safe(history.node)}.json", asdict(history))


def all_histories(root: Path) -> list[NodeHistory]:
    """Every node's history (for the rate limit); a bad record is set aside and left out."""
    folder = root / "history"
    if not folder.is_dir():
        return []
    found = (_checked_history(path, None) for path in sorted(folder.glob("*.json")))
    return [history for history in found if history is not None]


@contextlib.contextmanager
def policy_lock(root: Path) -> Iterator[None]:
    """Serialise drain decisions of concurrent gates/health checks."""
    make_dirs(root)
    fd = os.open(root / "policy.lock", os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC,
                 FILE_MODE)
    with contextlib.suppress(OSError):  # the umask may have taken bits off a new one
        os.fchmod(fd, FILE_MODE)
    with os.fdopen(fd, "r+", encoding="utf-8") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)
