"""The zb-interleaved search's hot loops in C (``zb_native.c``), compiled on first use with
the system's C compiler (``$CC``, else ``cc``) into the user's build cache and loaded with
ctypes; :func:`library` is None wherever that cannot be done, and the search then runs its
Python reference, which gives the same tables (tests hold the two equal).

The cache is ``$GANTRY_BUILD_CACHE`` (default ``~/.cache/gantry/build``, the root
``gantry build`` uses) ``/schedules-<key>/``, keyed by the source, the compiler and its
flags; the library is compiled to a temporary name and renamed into place, so ranks and
commands starting together never load half a file. The compiler runs under the bounded
process runner; why the library is missing is one line (a warning on stderr, once per
process, and :func:`unavailable_reason`).
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import sys
import tempfile
from collections.abc import Mapping, Sequence
from functools import lru_cache
from pathlib import Path

import numpy as np
import numpy.typing as npt

from launcher.cmake import find_tool
from launcher.errors import GantryError
from launcher.process_runner import run_tool
from launcher.schedules.table import Op, ScheduleTable

SOURCE = Path(__file__).with_name("zb_native.c")
FLAGS = ("-O2", "-std=c11", "-fPIC", "-shared", "-ffp-contract=off", "-fno-fast-math")
"""No contraction into fused multiply-adds, no reassociation: the doubles round as Python's."""
COMPILE_TIMEOUT_S = 60.0
LIBRARY_NAME = "libgantry_schedules.so"

DONE, STALL, PAST, FORK, ERROR = 0, 1, 2, 3, -1
"""zb_native.c's statuses."""

_c_int, _c_double, _p = ctypes.c_int, ctypes.c_double, ctypes.c_void_p
_SIGNATURES: dict[str, tuple[object, list[object]]] = {
    "zb_new": (_p, [_c_int, _c_int, _c_int, _c_double]),
    "zb_copy": (_p, [_p]),
    "zb_free": (None, [_p]),
    "zb_run": (_c_int, [_p, _c_int, _c_int, _c_int, _c_int, _c_int, _c_double, _c_double,
                        _c_double, _c_double, _c_int, ctypes.POINTER(_c_int)]),
    "zb_orders": (_c_int, [_p, _p]),
    "zb_rank_rows": (_c_int, [_c_int, _c_int, _c_int, _c_int, _p, _c_int, _p, _c_int,
                              ctypes.POINTER(_c_int), _p]),
    "zb_makespan": (_c_int, [_c_int, _p, _p, _p, _c_double, ctypes.POINTER(_c_double)]),
}
_reason: list[str] = []


def cache_dir() -> Path:
    """Where the compiled library of this source and compiler lives."""
    env = os.environ.get("GANTRY_BUILD_CACHE")
    root = Path(env) if env else Path.home() / ".cache" / "gantry" / "build"
    return root / f"schedules-{_key(find_tool('CC', 'cc'))}"


def _key(compiler: str) -> str:
    digest = hashlib.sha256(SOURCE.read_bytes())
    digest.update("\0".join((compiler, *FLAGS)).encode())
    return digest.hexdigest()[:16]


@lru_cache(maxsize=1)
def library() -> ctypes.CDLL | None:
    """The loaded library (compiled first if the cache lacks it), else None."""
    try:
        path = cache_dir() / LIBRARY_NAME
        if not path.is_file():
            _compile(path)
        lib = ctypes.CDLL(str(path))
    except (GantryError, OSError) as err:
        _reason[:] = [str(err).splitlines()[0] if str(err) else type(err).__name__]
        sys.stderr.write(f"warning: {_reason[0]}; zb-interleaved searches in Python "
                         "(the same tables, slower)\n")
        return None
    for name, (restype, argtypes) in _SIGNATURES.items():
        function = getattr(lib, name)
        function.restype, function.argtypes = restype, argtypes
    return lib


def unavailable_reason() -> str | None:
    """Why :func:`library` is None (one line), else None."""
    return _reason[0] if library() is None and _reason else None


def _compile(path: Path) -> None:
    compiler = find_tool("CC", "cc")
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{LIBRARY_NAME}.", dir=path.parent)
    os.close(fd)
    try:
        done = run_tool([compiler, *FLAGS, "-o", tmp, str(SOURCE)], COMPILE_TIMEOUT_S)
        if not done.ok:
            lines = [ln for ln in (done.stderr + "\n" + done.stdout).splitlines() if ln.strip()]
            raise GantryError(f"schedules: {compiler} {SOURCE.name}: "
                              f"{lines[0] if lines else done.describe_failure()}")
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


class Greedy:
    """A zb_native.c list-scheduler state (zb_interleaved's ``_Greedy``), freed with this.
    A copy shares the orders made so far with the state it was copied from."""

    __slots__ = ("_base", "_lib", "handle", "m", "pp", "v")

    def __init__(self, lib: ctypes.CDLL, handle: int | None, pp: int, m: int, v: int,
                 base: Greedy | None = None) -> None:
        if not handle:
            raise MemoryError("zb_native: no memory for a greedy state")
        self._lib, self.handle, self.pp, self.m, self.v = lib, handle, pp, m, v
        self._base = base  # a copy reads its start's orders from there: kept alive

    @classmethod
    def new(cls, lib: ctypes.CDLL, pp: int, m: int, v: int, rest: float) -> Greedy:
        return cls(lib, lib.zb_new(pp, m, v, rest), pp, m, v)

    def copy(self) -> Greedy:
        return Greedy(self._lib, self._lib.zb_copy(self.handle), self.pp, self.m, self.v, self)

    def run(self, cap: int, cost: tuple[int, int, int], backward_first: bool,
            select: tuple[float, float, float], limit: float, parted: int) -> tuple[int, int]:
        """One zb_run: (status, the holding where it forks)."""
        held = _c_int(0)
        status = self._lib.zb_run(self.handle, cap, *cost, int(backward_first), *select,
                                  limit, parted, ctypes.byref(held))
        return int(status), held.value

    def orders(self) -> bytes:
        """The finished orders: int32 (op, stage, mb) triples, rank after rank."""
        out = np.empty(self.pp * 9 * self.v * self.m, dtype=np.int32)
        if self._lib.zb_orders(self.handle, out.ctypes.data) != DONE:
            raise RuntimeError("zb_native: orders of an unfinished state")
        return out.tobytes()

    def __del__(self) -> None:
        self._lib.zb_free(self.handle)


def rank_rows(lib: ctypes.CDLL, pp: int, v: int, m: int,
              orders: Sequence[npt.NDArray[np.int32]]) -> tuple[list[npt.NDArray[np.int32]],
                                                                tuple[int, ...]] | None:
    """build_table's rows (lookahead 1) and slots per stage from per-rank int32 [n, 3]
    compute orders; None where zb_native.c refuses them (the Python builder says why)."""
    counts = np.zeros(pp * v, dtype=np.int32)
    rows: list[npt.NDArray[np.int32]] = []
    used = _c_int(0)
    for r, order in enumerate(orders):
        order = np.ascontiguousarray(order, dtype=np.int32)
        n = order.shape[0]
        out = np.empty((5 * n, 5), dtype=np.int32)
        if lib.zb_rank_rows(pp, v, m, r, order.ctypes.data, n, out.ctypes.data, 5 * n,
                            ctypes.byref(used), counts.ctypes.data) != DONE:
            return None
        done = out[:used.value].copy()
        done.setflags(write=False)
        rows.append(done)
    return rows, tuple(int(c) for c in counts)


def makespan(lib: ctypes.CDLL, table: ScheduleTable, costs: Mapping[Op, float],
             bound: float | None) -> tuple[int, float]:
    """zb_makespan of ``table`` at ``costs`` (op -> per stage), cut at ``bound``: (DONE, the
    makespan), (PAST, nan) or (ERROR, nan), where the Python reference says what is wrong."""
    cost = np.full(16, np.nan)
    for op, c in costs.items():
        cost[int(op)] = c / table.virtual_stages
    rows = [np.ascontiguousarray(r, dtype=np.int32) for r in table.rows]
    pointers = (ctypes.c_void_p * len(rows))(*[r.ctypes.data for r in rows])
    counts = np.array([r.shape[0] for r in rows], dtype=np.int32)
    out = _c_double(float("nan"))
    status = lib.zb_makespan(table.pp, pointers, counts.ctypes.data, cost.ctypes.data,
                             float("inf") if bound is None else bound, ctypes.byref(out))
    return int(status), out.value
