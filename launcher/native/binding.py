"""ctypes binding of the native stage API (``native/include/gantry/stage.h``).

``NativeLibrary`` loads ``libgantry_native.so`` (either backend) with the signatures of the whole
stage API; ``BaseStage`` owns one ``gt_stage`` and holds what every wrapper shares (creation,
tensor table, wte range, load, zero_grad, norms, weight-gradient half); ``NativeStage`` adds
numpy views of the CPU build's host buffers, forward/backward of micro-batches, AdamW and save
(``cuda_stage.CudaStage`` adds the CUDA build's device activations). ``tensor_table``,
``read_buffer`` and ``write_buffer`` serve stages the pipeline owns too. A failing C call raises
:class:`UserInputError` (bad input: file, tensor, shape; exit 2) or :class:`NativeError` with
the library's message.
"""

from __future__ import annotations

import ctypes
import os
from collections.abc import Callable
from dataclasses import dataclass
from enum import IntEnum
from pathlib import Path
from types import TracebackType
from typing import Any

import numpy as np
import numpy.typing as npt

from launcher.errors import GantryError, UserInputError
from launcher.native.model_config import GPTConfig

GT_OK = 0
GT_EINPUT = 2
GT_ESTATE = 5
LIBRARY_ENV = "GANTRY_NATIVE_LIB"
"""Environment variable naming the shared library to load (overrides the default path)."""
DEFAULT_LIBRARY = Path(__file__).resolve().parents[2] / "native" / "build" / "libgantry_native.so"

FloatArray = npt.NDArray[np.float32]
IntArray = npt.NDArray[np.int32]


class NativeError(GantryError):
    """A failure inside the native library that is not bad user input."""


class Buffer(IntEnum):
    """The four same-layout fp32 buffers of a stage (``gt_buffer``)."""

    PARAMS = 0
    GRADS = 1
    ADAM_M = 2
    ADAM_V = 3


class LrKind(IntEnum):
    """Learning-rate schedule kinds (``gt_lr_kind``)."""

    CONSTANT = 0
    COSINE = 1


class _Config(ctypes.Structure):
    _fields_ = [
        ("vocab_size", ctypes.c_int),
        ("max_seq_len", ctypes.c_int),
        ("n_layer", ctypes.c_int),
        ("n_head", ctypes.c_int),
        ("n_embd", ctypes.c_int),
    ]


class _TensorInfo(ctypes.Structure):
    _fields_ = [
        ("name", ctypes.c_char_p),
        ("ndim", ctypes.c_int),
        ("shape", ctypes.c_int64 * 2),
        ("offset", ctypes.c_size_t),
        ("numel", ctypes.c_size_t),
        ("decay", ctypes.c_int),
    ]


@dataclass(frozen=True)
class TensorInfo:
    """One tensor of a stage's buffers."""

    name: str
    """Hugging Face GPT-2 name, e.g. ``transformer.h.3.attn.c_attn.weight``."""
    shape: tuple[int, ...]
    """Shape (Conv1D layout (in, out) for linear weights)."""
    offset: int
    """Element offset into each buffer."""
    numel: int
    """Number of elements."""
    decay: bool
    """Whether AdamW weight decay applies (2-D tensors)."""


_P = ctypes.POINTER
GradReadyFn = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_size_t)
"""The C type of a gradients-ready hook (gt_grad_ready_fn): (ctx, offset, count) -> status."""
_f32p = _P(ctypes.c_float)
_i32p = _P(ctypes.c_int32)
_SIGNATURES: dict[str, tuple[Any, list[Any]]] = {
    "gt_last_error": (ctypes.c_char_p, []),
    "gt_api_version": (ctypes.c_int, []),
    "gt_stage_create": (
        ctypes.c_int,
        [_P(_Config), ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_int,
         ctypes.c_int, ctypes.c_int, _P(ctypes.c_void_p)],
    ),
    "gt_stage_free": (None, [ctypes.c_void_p]),
    "gt_stage_buffer": (_f32p, [ctypes.c_void_p, ctypes.c_int]),
    "gt_stage_num_params": (ctypes.c_size_t, [ctypes.c_void_p]),
    "gt_stage_wte_range": (
        ctypes.c_int, [ctypes.c_void_p, _P(ctypes.c_size_t), _P(ctypes.c_size_t)]
    ),
    "gt_stage_num_tensors": (ctypes.c_int, [ctypes.c_void_p]),
    "gt_stage_tensor": (_P(_TensorInfo), [ctypes.c_void_p, ctypes.c_int]),
    "gt_stage_forward": (
        ctypes.c_int,
        [ctypes.c_void_p, ctypes.c_int, _i32p, _f32p, _f32p, _i32p, _f32p],
    ),
    "gt_stage_backward": (
        ctypes.c_int, [ctypes.c_void_p, ctypes.c_int, _f32p, _f32p, ctypes.c_float]
    ),
    "gt_stage_backward_input": (
        ctypes.c_int, [ctypes.c_void_p, ctypes.c_int, _f32p, _f32p, ctypes.c_float]
    ),
    "gt_stage_backward_weight": (ctypes.c_int, [ctypes.c_void_p, ctypes.c_int]),
    "gt_stage_zero_grad": (ctypes.c_int, [ctypes.c_void_p]),
    "gt_stage_start_accumulation": (ctypes.c_int, [ctypes.c_void_p]),
    "gt_stage_grad_sq_sum": (
        ctypes.c_int, [ctypes.c_void_p, ctypes.c_int, _P(ctypes.c_double)]
    ),
    "gt_stage_adamw_step": (
        ctypes.c_int,
        [ctypes.c_void_p, ctypes.c_float, ctypes.c_float, ctypes.c_float, ctypes.c_float,
         ctypes.c_float, ctypes.c_int, ctypes.c_float],
    ),
    "gt_stage_adamw_range": (
        ctypes.c_int,
        [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_size_t, ctypes.c_float, ctypes.c_float,
         ctypes.c_float, ctypes.c_float, ctypes.c_float, ctypes.c_int, ctypes.c_float],
    ),
    "gt_stage_join_optimizer": (ctypes.c_int, [ctypes.c_void_p]),
    "gt_stage_set_grad_ready": (ctypes.c_int, [ctypes.c_void_p, ctypes.c_void_p,
                                               ctypes.c_void_p]),
    "gt_stage_norm_capture_begin": (ctypes.c_int, [ctypes.c_void_p]),
    "gt_stage_norm_capture_end": (ctypes.c_int, [ctypes.c_void_p, _P(ctypes.c_double)]),
    "gt_clip_coef": (ctypes.c_float, [ctypes.c_double, ctypes.c_double]),
    "gt_lr_at": (
        ctypes.c_double,
        [ctypes.c_int, ctypes.c_int, ctypes.c_double, ctypes.c_double, ctypes.c_int,
         ctypes.c_int],
    ),
    "gt_stage_load": (ctypes.c_int, [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_int]),
    "gt_stage_save": (ctypes.c_int, [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_int]),
    "gt_shard_read": (
        ctypes.c_int,
        [ctypes.c_char_p, _P(_P(ctypes.c_uint16)), _P(ctypes.c_size_t)],
    ),
    "gt_shard_write": (ctypes.c_int, [ctypes.c_char_p, _P(ctypes.c_uint16), ctypes.c_size_t]),
    "gt_free": (None, [ctypes.c_void_p]),
    # backend functions (API version 2): both builds have them
    "gt_backend_name": (ctypes.c_char_p, []),
    "gt_backend_memory": (ctypes.c_int, [_P(ctypes.c_size_t), _P(ctypes.c_size_t)]),
    "gt_stage_backend_info": (ctypes.c_char_p, [ctypes.c_void_p]),
    "gt_stage_activation_dtype": (ctypes.c_int, [ctypes.c_void_p]),
    "gt_stage_activation_bytes": (ctypes.c_size_t, [ctypes.c_void_p]),
    "gt_stage_set_stream": (ctypes.c_int, [ctypes.c_void_p, ctypes.c_void_p]),
    "gt_stage_synchronize": (ctypes.c_int, [ctypes.c_void_p]),
    "gt_stage_read_buffer": (
        ctypes.c_int, [ctypes.c_void_p, ctypes.c_int, ctypes.c_size_t, ctypes.c_size_t, _f32p]
    ),
    "gt_stage_write_buffer": (
        ctypes.c_int, [ctypes.c_void_p, ctypes.c_int, ctypes.c_size_t, ctypes.c_size_t, _f32p]
    ),
    "gt_stage_params_updated": (ctypes.c_int, [ctypes.c_void_p]),
    # page-locked host memory (API version 7)
    "gt_host_pin": (ctypes.c_int, [ctypes.c_void_p, ctypes.c_size_t]),
    "gt_host_unpin": (ctypes.c_int, [ctypes.c_void_p]),
    # runtime switches (API version 8)
    "gt_runtime_config_describe": (ctypes.c_int, [ctypes.c_char_p, ctypes.c_size_t]),
}


#: libgomp spin count before an idle OpenMP thread sleeps (see NativeLibrary.__init__).
GOMP_SPINCOUNT_DEFAULT = "1000"


class NativeLibrary:
    """The loaded ``libgantry_native.so`` with typed function signatures."""

    def __init__(self, path: Path | None = None) -> None:
        if path is None:
            env = os.environ.get(LIBRARY_ENV)
            path = Path(env) if env else DEFAULT_LIBRARY
        if not path.is_file():
            raise GantryError(
                f"{path}: native library not found (build it with cmake in native/, "
                f"or set {LIBRARY_ENV})"
            )
        self.path = path
        # The library runs OpenMP loops (libgomp) between OpenBLAS calls (its own pthread pool).
        # With libgomp's default spin-wait its idle threads hold the cores the BLAS threads
        # need: at 2 threads a step took 1.94 s against 0.56 s with a short spin
        # (bench/bench_cpu_step.py, docs/BENCHMARKS.md). libgomp reads this when it is loaded,
        # i.e. by the CDLL below; a value the user set wins.
        os.environ.setdefault("GOMP_SPINCOUNT", GOMP_SPINCOUNT_DEFAULT)
        try:
            self.lib = ctypes.CDLL(str(path))
        except OSError as err:
            raise UserInputError(f"{path}: cannot load the native library ({err})") from None
        for name, (restype, argtypes) in _SIGNATURES.items():
            try:
                func = getattr(self.lib, name)
            except AttributeError:
                raise UserInputError(f"{path}: not gantry's native library (no {name}; "
                                     "expected libgantry_native.so of this gantry)") from None
            func.restype = restype
            func.argtypes = argtypes

    def last_error(self) -> str:
        message: bytes = self.lib.gt_last_error()
        return message.decode(errors="replace")

    def check(self, status: int) -> None:
        """Raises the library's last error when status is not GT_OK."""
        if status == GT_OK:
            return
        if status == GT_EINPUT:
            raise UserInputError(self.last_error())
        raise NativeError(self.last_error())

    def lr_at(
        self, kind: LrKind, step: int, max_lr: float, min_lr: float, warmup: int, total: int
    ) -> float:
        return float(self.lib.gt_lr_at(int(kind), step, max_lr, min_lr, warmup, total))

    def clip_coef(self, total_norm: float, max_norm: float) -> float:
        return float(self.lib.gt_clip_coef(total_norm, max_norm))

    def read_shard(self, path: Path) -> npt.NDArray[np.uint16]:
        """Reads a token shard through the C reader (bounds-checked)."""
        data = _P(ctypes.c_uint16)()
        count = ctypes.c_size_t()
        self.check(self.lib.gt_shard_read(str(path).encode(), ctypes.byref(data),
                                          ctypes.byref(count)))
        try:
            if count.value == 0:
                return np.zeros(0, dtype=np.uint16)
            return np.ctypeslib.as_array(data, shape=(count.value,)).copy()
        finally:
            self.lib.gt_free(data)


def _array_ptr(array: Any, dtype: type, shape: tuple[int, ...], what: str, ptr_type: Any) -> Any:
    """The C pointer of a C-contiguous ``dtype`` array of ``shape`` (None for None)."""
    if array is None:
        return None
    if array.dtype != dtype or array.shape != shape or not array.flags.c_contiguous:
        raise UserInputError(
            f"{what}: expected a C-contiguous {np.dtype(dtype).name} array of shape {shape}, "
            f"got {array.dtype} {array.shape}"
        )
    return array.ctypes.data_as(ptr_type)


def _f32(array: FloatArray | None, shape: tuple[int, ...], what: str) -> Any:
    return _array_ptr(array, np.float32, shape, what, _f32p)


def _i32(array: IntArray | None, shape: tuple[int, ...], what: str) -> Any:
    return _array_ptr(array, np.int32, shape, what, _i32p)


def tensor_table(lib: NativeLibrary, handle: Any) -> list[TensorInfo]:
    """The tensor table of the stage behind ``handle``, in buffer order."""
    infos = []
    for index in range(lib.lib.gt_stage_num_tensors(handle)):
        info = lib.lib.gt_stage_tensor(handle, index).contents
        infos.append(TensorInfo(
            name=info.name.decode(),
            shape=tuple(int(info.shape[d]) for d in range(info.ndim)),
            offset=int(info.offset),
            numel=int(info.numel),
            decay=bool(info.decay),
        ))
    return infos


def read_buffer(lib: NativeLibrary, handle: Any, which: Buffer, num_params: int,
                out: FloatArray | None = None) -> FloatArray:
    """A host copy of one whole buffer (host or device memory alike), into ``out`` when given
    (float32, contiguous, ``num_params`` elements: e.g. a pinned staging array)."""
    if out is None:
        out = np.empty(num_params, dtype=np.float32)
    elif out.dtype != np.float32 or out.size != num_params or not out.flags.c_contiguous:
        raise ValueError(f"read_buffer: out must be {num_params} contiguous float32 values")
    lib.check(lib.lib.gt_stage_read_buffer(handle, int(which), 0, num_params,
                                           out.ctypes.data_as(_f32p)))
    return out


def pin_host(lib: NativeLibrary, array: npt.NDArray[Any]) -> str | None:
    """Page-locks ``array``'s memory (a no-op on the CPU build) so buffer copies into it run
    as direct DMA; None when done, else why not (the array stays usable, only unpinned).
    Call :func:`unpin_host` before the array is freed."""
    if lib.lib.gt_host_pin(array.ctypes.data, array.nbytes) == GT_OK:
        return None
    return lib.last_error()


def unpin_host(lib: NativeLibrary, array: npt.NDArray[Any]) -> None:
    """Undoes a successful :func:`pin_host`."""
    lib.check(lib.lib.gt_host_unpin(array.ctypes.data))


def write_buffer(lib: NativeLibrary, handle: Any, which: Buffer, offset: int,
                 values: FloatArray) -> None:
    """Copies float32 ``values`` into buffer ``which`` at element ``offset``."""
    flat = np.ascontiguousarray(values, dtype=np.float32).reshape(-1)
    lib.check(lib.lib.gt_stage_write_buffer(handle, int(which), offset, flat.size,
                                            flat.ctypes.data_as(_f32p)))


class BaseStage:
    """One ``gt_stage`` this object owns (either backend); close it (or use ``with``) to free it.

    Holds what does not depend on where activations live: the tensor table, the wte range,
    loading, zeroing and norms of the gradients and the weight-gradient half of the backward.
    """

    _KIND = "native"
    """Names the stage in the used-after-close error."""

    def __init__(
        self,
        lib: NativeLibrary,
        config: GPTConfig,
        layer_begin: int,
        layer_end: int,
        *,
        is_first: bool,
        is_last: bool,
        batch: int,
        seq_len: int,
        n_slots: int = 1,
    ) -> None:
        self._handle: ctypes.c_void_p | None = None
        self._grad_ready: Any = None  # the armed hook's C callback, kept alive
        self.lib = lib
        self.config = config
        self.layer_begin, self.layer_end = layer_begin, layer_end
        self.is_first, self.is_last = is_first, is_last
        self.batch, self.seq_len = batch, seq_len
        cfg = _Config(config.vocab_size, config.max_seq_len, config.n_layer, config.n_head,
                      config.n_embd)
        handle = ctypes.c_void_p()
        lib.check(lib.lib.gt_stage_create(ctypes.byref(cfg), layer_begin, layer_end,
                                          int(is_first), int(is_last), batch, seq_len, n_slots,
                                          ctypes.byref(handle)))
        self._handle = handle
        self.num_params = int(lib.lib.gt_stage_num_params(handle))
        self.tensors = tensor_table(lib, handle)

    # lifetime -------------------------------------------------------------------------------
    def close(self) -> None:
        if self._handle is not None:
            self.lib.lib.gt_stage_free(self._handle)
            self._handle = None

    def __del__(self) -> None:
        self.close()

    @property
    def handle(self) -> ctypes.c_void_p:
        if self._handle is None:
            raise NativeError(f"{self._KIND} stage used after close()")
        return self._handle

    # buffers --------------------------------------------------------------------------------
    def _tensor_named(self, name: str) -> TensorInfo:
        for info in self.tensors:
            if info.name == name:
                return info
        raise KeyError(name)

    def wte_range(self) -> tuple[int, int] | None:
        """(offset, count) of the wte copy within every buffer, or None."""
        offset, count = ctypes.c_size_t(), ctypes.c_size_t()
        has = self.lib.lib.gt_stage_wte_range(self.handle, ctypes.byref(offset),
                                              ctypes.byref(count))
        return (int(offset.value), int(count.value)) if has else None

    def load(self, path: Path, which: Buffer = Buffer.PARAMS) -> None:
        self.lib.check(self.lib.lib.gt_stage_load(self.handle, str(path).encode(), int(which)))

    # backward and gradients -----------------------------------------------------------------
    def backward_weight(self, slot: int) -> None:
        """Weight-gradient half of the backward (zero-bubble W); frees the slot."""
        self.lib.check(self.lib.lib.gt_stage_backward_weight(self.handle, slot))

    def zero_grad(self) -> None:
        self.lib.check(self.lib.lib.gt_stage_zero_grad(self.handle))

    def start_accumulation(self) -> None:
        """The gradients restart from zero (API version 6); on a GPU stage the next weight
        action writes the weight matrices' gradients instead of adding to them."""
        self.lib.check(self.lib.lib.gt_stage_start_accumulation(self.handle))

    def adamw_range(
        self, offset: int, count: int, *, lr: float, beta1: float, beta2: float, eps: float,
        weight_decay: float, step: int, grad_scale: float = 1.0,
    ) -> None:
        """AdamW of parameters [offset, offset + count) only (API version 5); then
        :meth:`join_optimizer` before reading buffers on a GPU stage."""
        self.lib.check(self.lib.lib.gt_stage_adamw_range(
            self.handle, offset, count, lr, beta1, beta2, eps, weight_decay, step, grad_scale))

    def join_optimizer(self) -> None:
        self.lib.check(self.lib.lib.gt_stage_join_optimizer(self.handle))

    def set_grad_ready(self, hook: Callable[[int, int], None] | None) -> None:
        """Arms the gradients-ready hook (stage.h): hook(offset, count) for each range whose
        gradients are final, during backward / backward_weight (run eagerly while armed);
        None disarms it. An exception in the hook fails the action."""
        if hook is None:
            self._grad_ready = None
            self.lib.check(self.lib.lib.gt_stage_set_grad_ready(self.handle, None, None))
            return

        def call(_ctx: int | None, offset: int, count: int) -> int:
            try:
                hook(offset, count)
            except Exception:
                return GT_ESTATE
            return GT_OK

        self._grad_ready = GradReadyFn(call)  # kept alive while armed
        self.lib.check(self.lib.lib.gt_stage_set_grad_ready(
            self.handle, ctypes.cast(self._grad_ready, ctypes.c_void_p), None))

    def norm_capture_begin(self) -> None:
        """From now on every :meth:`adamw_range` also sums its raw gradients' squares (API
        version 6); restarts a capture already running."""
        self.lib.check(self.lib.lib.gt_stage_norm_capture_begin(self.handle))

    def norm_capture_end(self) -> float:
        """The captured sum of squares (waits for the ranges on a GPU stage)."""
        out = ctypes.c_double()
        self.lib.check(self.lib.lib.gt_stage_norm_capture_end(self.handle, ctypes.byref(out)))
        return float(out.value)

    def grad_sq_sum(self, include_wte: bool = True) -> float:
        out = ctypes.c_double()
        self.lib.check(self.lib.lib.gt_stage_grad_sq_sum(self.handle, int(include_wte),
                                                         ctypes.byref(out)))
        return float(out.value)


class NativeStage(BaseStage):
    """A CPU-build stage with numpy views of its host buffers.

    Numpy views returned by :meth:`buffer` and :meth:`tensor_view` share the stage's memory and
    must not be used after :meth:`close`.
    """

    def __enter__(self) -> NativeStage:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    # buffers --------------------------------------------------------------------------------
    def buffer(self, which: Buffer) -> FloatArray:
        """A numpy view of the whole buffer (num_params float32)."""
        ptr = self.lib.lib.gt_stage_buffer(self.handle, int(which))
        return np.ctypeslib.as_array(ptr, shape=(self.num_params,))

    def tensor_view(self, which: Buffer, name: str) -> FloatArray:
        """A numpy view of one tensor of a buffer, shaped."""
        info = self._tensor_named(name)
        return self.buffer(which)[info.offset : info.offset + info.numel].reshape(info.shape)

    # compute --------------------------------------------------------------------------------
    def _act_shape(self) -> tuple[int, int, int]:
        return (self.batch, self.seq_len, self.config.n_embd)

    def forward(
        self,
        slot: int,
        *,
        tokens: IntArray | None = None,
        x_in: FloatArray | None = None,
        targets: IntArray | None = None,
    ) -> FloatArray | float:
        """Forward of one micro-batch: returns x_out (non-last) or the mean loss (last)."""
        bt = (self.batch, self.seq_len)
        x_out = None if self.is_last else np.empty(self._act_shape(), dtype=np.float32)
        loss = ctypes.c_float()
        self.lib.check(self.lib.lib.gt_stage_forward(
            self.handle, slot,
            _i32(tokens, bt, "tokens") if self.is_first else None,
            _f32(x_in, self._act_shape(), "x_in") if not self.is_first else None,
            _f32(x_out, self._act_shape(), "x_out"),
            _i32(targets, bt, "targets") if self.is_last else None,
            ctypes.byref(loss) if self.is_last else None,
        ))
        return float(loss.value) if x_out is None else x_out

    def _backward_call(
        self, name: str, slot: int, dx_out: FloatArray | None, loss_scale: float
    ) -> FloatArray | None:
        dx_in = None if self.is_first else np.empty(self._act_shape(), dtype=np.float32)
        func = getattr(self.lib.lib, name)
        self.lib.check(func(
            self.handle, slot,
            _f32(dx_out, self._act_shape(), "dx_out") if not self.is_last else None,
            _f32(dx_in, self._act_shape(), "dx_in"), loss_scale,
        ))
        return dx_in

    def backward(
        self, slot: int, dx_out: FloatArray | None = None, loss_scale: float = 1.0
    ) -> FloatArray | None:
        """Full backward (grads accumulate); returns dx_in (None on the first stage)."""
        return self._backward_call("gt_stage_backward", slot, dx_out, loss_scale)

    def backward_input(
        self, slot: int, dx_out: FloatArray | None = None, loss_scale: float = 1.0
    ) -> FloatArray | None:
        """Input-gradient half of the backward (zero-bubble B); keeps the slot."""
        return self._backward_call("gt_stage_backward_input", slot, dx_out, loss_scale)

    # optimizer ------------------------------------------------------------------------------
    def adamw_step(
        self, *, lr: float, beta1: float, beta2: float, eps: float, weight_decay: float,
        step: int, grad_scale: float = 1.0,
    ) -> None:
        self.lib.check(self.lib.lib.gt_stage_adamw_step(
            self.handle, lr, beta1, beta2, eps, weight_decay, step, grad_scale))


    # I/O ------------------------------------------------------------------------------------
    def save(self, path: Path, which: Buffer = Buffer.PARAMS) -> None:
        self.lib.check(self.lib.lib.gt_stage_save(self.handle, str(path).encode(), int(which)))
