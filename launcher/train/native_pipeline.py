"""ctypes binding of the pipeline executor (``native/include/gantry/pipeline.h``) and the comm
layer (``native/src/comm.h``: MPI on the CPU build, NCCL on the CUDA build), on top of the stage
binding's loaded library. Stage buffers are read and written through copies
(``gt_stage_read_buffer`` / ``gt_stage_write_buffer``), so the same code drives host (CPU) and
device (CUDA) buffers."""

from __future__ import annotations

import ctypes
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import numpy.typing as npt

from launcher.native.binding import (
    Buffer,
    NativeLibrary,
    TensorInfo,
    _Config,
    read_buffer,
    tensor_table,
    write_buffer,
)
from launcher.native.model_config import GPTConfig

_P = ctypes.POINTER
_i32p = _P(ctypes.c_int32)


class StepArgs(ctypes.Structure):
    """``gt_step_args``."""

    _fields_ = [
        ("step", ctypes.c_int), ("total_steps", ctypes.c_int), ("lr_kind", ctypes.c_int),
        ("warmup_steps", ctypes.c_int), ("max_lr", ctypes.c_double),
        ("min_lr", ctypes.c_double), ("beta1", ctypes.c_float), ("beta2", ctypes.c_float),
        ("eps", ctypes.c_float), ("weight_decay", ctypes.c_float),
        ("grad_clip", ctypes.c_float),
    ]


class StepResult(ctypes.Structure):
    """``gt_step_result``."""

    _fields_ = [
        (name, ctypes.c_double) for name in (
            "loss", "grad_norm", "lr", "compute_s", "send_s", "recv_s", "bubble_s", "sync_s",
            "total_s", "dp_wait_s",
        )
    ] + [("dp_buckets", ctypes.c_int32), ("opt_ranges", ctypes.c_int32)] + [
        ("tied_s", ctypes.c_double), ("norm_s", ctypes.c_double)]


class TraceEvent(ctypes.Structure):
    """``gt_trace_event``."""

    _fields_ = [
        ("op", ctypes.c_int32), ("stage", ctypes.c_int32), ("micro_batch", ctypes.c_int32),
        ("pad", ctypes.c_int32), ("t0", ctypes.c_double), ("t1", ctypes.c_double),
    ]


COMM_ID_BYTES = 128
"""Size of the communicator bootstrap id (``GT_COMM_ID_BYTES``, an ncclUniqueId)."""

# the pipeline and comm functions (the stage API's are set by NativeLibrary)
_SIGNATURES = {
    "gt_comm_backend": (ctypes.c_char_p, []),
    "gt_comm_unique_id": (ctypes.c_int, [ctypes.c_void_p, ctypes.c_size_t]),
    "gt_comm_create": (
        ctypes.c_int,
        [ctypes.c_int] * 6 + [ctypes.c_char_p, ctypes.c_size_t, _P(ctypes.c_void_p)],
    ),
    "gt_comm_mpi_create": (ctypes.c_int, [ctypes.c_int] * 6 + [_P(ctypes.c_void_p)]),
    "gt_comm_free": (None, [ctypes.c_void_p]),
    "gt_pipeline_create": (
        ctypes.c_int,
        [_P(_Config), ctypes.c_void_p, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_int,
         _i32p, _i32p, _P(ctypes.c_void_p)],
    ),
    "gt_pipeline_free": (None, [ctypes.c_void_p]),
    "gt_pipeline_num_chunks": (ctypes.c_int, [ctypes.c_void_p]),
    "gt_pipeline_chunk": (ctypes.c_void_p, [ctypes.c_void_p, ctypes.c_int]),
    "gt_pipeline_step": (
        ctypes.c_int,
        [ctypes.c_void_p, _i32p, ctypes.c_int, _i32p, _i32p, _P(StepArgs), _P(StepResult)],
    ),
    "gt_pipeline_trace": (
        ctypes.c_int, [ctypes.c_void_p, _P(_P(TraceEvent)), _P(ctypes.c_int)]
    ),
}


def load_library(path: Path | None) -> NativeLibrary:
    lib = NativeLibrary(path)
    for name, (restype, argtypes) in _SIGNATURES.items():
        func = getattr(lib.lib, name)
        func.restype = restype
        func.argtypes = argtypes
    return lib


def _ptr(array: npt.NDArray[np.int32]) -> ctypes._Pointer[ctypes.c_int32]:
    return array.ctypes.data_as(_i32p)


def make_comm_id(lib: NativeLibrary) -> bytes:
    """A new communicator bootstrap id (call on world rank 0 only, then broadcast it): an
    ncclUniqueId on the CUDA build, zeros on the CPU build."""
    buf = ctypes.create_string_buffer(COMM_ID_BYTES)
    lib.check(lib.lib.gt_comm_unique_id(buf, COMM_ID_BYTES))
    return buf.raw


def device_memory_used(lib: NativeLibrary) -> int:
    """Bytes of device memory in use on this rank's GPU (0 on the CPU build)."""
    used, total = ctypes.c_size_t(), ctypes.c_size_t()
    lib.check(lib.lib.gt_backend_memory(ctypes.byref(used), ctypes.byref(total)))
    return int(used.value)


@dataclass
class Chunk:
    """A stage owned by the pipeline (borrowed pointer: valid while the pipeline lives)."""

    lib: NativeLibrary
    handle: int
    stage: int
    """Global stage index."""
    tensors: list[TensorInfo]
    num_params: int

    def info(self) -> str:
        """The backend's one-line description of this stage's kernels."""
        return str(self.lib.lib.gt_stage_backend_info(self.handle).decode())

    def read(self, which: Buffer,
             out: npt.NDArray[np.float32] | None = None) -> npt.NDArray[np.float32]:
        """A host copy of one whole buffer (into ``out`` when given)."""
        return read_buffer(self.lib, self.handle, which, self.num_params, out)

    def write(self, which: Buffer, offset: int, values: npt.NDArray[np.float32]) -> None:
        """Copies float32 ``values`` into buffer ``which`` at element ``offset``."""
        write_buffer(self.lib, self.handle, which, offset, values)

    def load(self, path: Path, which: Buffer = Buffer.PARAMS) -> None:
        self.lib.check(self.lib.lib.gt_stage_load(self.handle, str(path).encode(), int(which)))


class Pipeline:
    """The communicators and the executor of one rank; call :meth:`close` at the end."""

    def __init__(self, lib: NativeLibrary, config: GPTConfig, world_fint: int, *, pp: int,
                 dp: int, pipe_rank: int, replica: int, node_id: int, v: int, m: int,
                 batch: int, seq_len: int, stage_layers: list[tuple[int, int]],
                 slots_per_stage: tuple[int, ...], comm_id: bytes) -> None:
        self.lib = lib
        self._handle: ctypes.c_void_p | None = None
        comm = ctypes.c_void_p()
        lib.check(lib.lib.gt_comm_create(world_fint, pp, dp, pipe_rank, replica, node_id,
                                         comm_id, len(comm_id), ctypes.byref(comm)))
        self._comm: ctypes.c_void_p | None = comm
        cfg = _Config(config.vocab_size, config.max_seq_len, config.n_layer, config.n_head,
                      config.n_embd)
        layers = np.array(stage_layers, dtype=np.int32).reshape(-1)
        slots = np.array(slots_per_stage, dtype=np.int32)
        handle = ctypes.c_void_p()
        status = lib.lib.gt_pipeline_create(ctypes.byref(cfg), comm, v, m, batch, seq_len,
                                            _ptr(layers), _ptr(slots), ctypes.byref(handle))
        if status != 0:
            self.close()
            lib.check(status)
        self._handle = handle
        self.chunks: list[Chunk] = []
        for c in range(lib.lib.gt_pipeline_num_chunks(handle)):
            stage = int(lib.lib.gt_pipeline_chunk(handle, c))
            self.chunks.append(Chunk(lib, stage, c * pp + pipe_rank, tensor_table(lib, stage),
                                     int(lib.lib.gt_stage_num_params(stage))))

    def step(self, actions: npt.NDArray[np.int32], tokens: npt.NDArray[np.int32],
             targets: npt.NDArray[np.int32], args: StepArgs) -> StepResult:
        result = StepResult()
        self.lib.check(self.lib.lib.gt_pipeline_step(
            self._handle, _ptr(actions), int(actions.shape[0]), _ptr(tokens), _ptr(targets),
            ctypes.byref(args), ctypes.byref(result)))
        return result

    def trace(self) -> list[tuple[int, int, int, float, float]]:
        events = _P(TraceEvent)()
        count = ctypes.c_int()
        self.lib.check(self.lib.lib.gt_pipeline_trace(self._handle, ctypes.byref(events),
                                                      ctypes.byref(count)))
        return [(e.op, e.stage, e.micro_batch, e.t0, e.t1)
                for e in (events[i] for i in range(count.value))]

    def close(self) -> None:
        if getattr(self, "_handle", None) is not None:
            self.lib.lib.gt_pipeline_free(self._handle)
            self._handle = None
        if self._comm is not None:
            self.lib.lib.gt_comm_free(self._comm)
            self._comm = None
