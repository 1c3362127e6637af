"""A CUDA-backend stage driven from Python: device activations as torch tensors.

``CudaStage`` wraps one ``gt_stage`` of a library built with ``GANTRY_BACKEND=cuda``: activations
(x_in, x_out, dx_out, dx_in) are bf16 torch CUDA tensors passed by device pointer, tokens and
targets host int32 arrays, parameter buffers copied to and from numpy with
``gt_stage_read_buffer`` / ``gt_stage_write_buffer``. Used by the GPU parity tests and the GPU
benchmark; torch with CUDA is required (imported lazily by the callers).
"""

from __future__ import annotations

import ctypes
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from launcher.errors import GantryError
from launcher.native.binding import (
    _P,
    Buffer,
    NativeLibrary,
    TensorInfo,
    _Config,
    _i32,
    _TensorInfo,
)
from launcher.native.model_config import GPTConfig

_f32p = _P(ctypes.c_float)
_EXTRA_SIGNATURES: dict[str, tuple[Any, list[Any]]] = {
    "gt_backend_name": (ctypes.c_char_p, []),
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
}


def load_cuda_library(path: Path | None = None) -> NativeLibrary:
    """Loads the library and checks that it is the CUDA backend."""
    lib = NativeLibrary(path)
    for name, (restype, argtypes) in _EXTRA_SIGNATURES.items():
        func = getattr(lib.lib, name)
        func.restype = restype
        func.argtypes = argtypes
    backend = lib.lib.gt_backend_name().decode()
    if backend != "cuda":
        raise GantryError(f"{lib.path}: backend is '{backend}', expected 'cuda'")
    return lib


def _ptr(tensor: Any) -> Any:
    """Device pointer of a torch tensor, typed as the API's float*."""
    if tensor is None:
        return None
    return ctypes.cast(ctypes.c_void_p(tensor.data_ptr()), _f32p)


class CudaStage:
    """One stage on the GPU; ``close`` frees it."""

    def __init__(
        self, lib: NativeLibrary, config: GPTConfig, layer_begin: int, layer_end: int, *,
        is_first: bool, is_last: bool, batch: int, seq_len: int, n_slots: int = 1,
    ) -> None:
        import torch

        self._torch = torch
        self._handle: ctypes.c_void_p | None = None
        self.lib = lib
        self.config = config
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
        self.tensors = [self._tensor_info(i) for i in range(lib.lib.gt_stage_num_tensors(handle))]
        self.info = lib.lib.gt_stage_backend_info(handle).decode()

    def close(self) -> None:
        if self._handle is not None:
            self.lib.lib.gt_stage_free(self._handle)
            self._handle = None

    def __del__(self) -> None:
        self.close()

    @property
    def handle(self) -> ctypes.c_void_p:
        if self._handle is None:
            raise GantryError("CUDA stage used after close()")
        return self._handle

    def _tensor_info(self, index: int) -> TensorInfo:
        info: _TensorInfo = self.lib.lib.gt_stage_tensor(self._handle, index).contents
        return TensorInfo(
            name=info.name.decode(),
            shape=tuple(int(info.shape[d]) for d in range(info.ndim)),
            offset=int(info.offset), numel=int(info.numel), decay=bool(info.decay),
        )

    # buffers -------------------------------------------------------------------------------
    def read(self, which: Buffer) -> npt.NDArray[np.float32]:
        out = np.empty(self.num_params, dtype=np.float32)
        self.lib.check(self.lib.lib.gt_stage_read_buffer(
            self.handle, int(which), 0, self.num_params, out.ctypes.data_as(_f32p)))
        return out

    def write(self, which: Buffer, values: npt.NDArray[np.float32]) -> None:
        data = np.ascontiguousarray(values, dtype=np.float32)
        if data.shape != (self.num_params,):
            raise GantryError(f"write: expected {self.num_params} values, got {data.shape}")
        self.lib.check(self.lib.lib.gt_stage_write_buffer(
            self.handle, int(which), 0, self.num_params, data.ctypes.data_as(_f32p)))

    def tensor(self, which: Buffer, name: str) -> npt.NDArray[np.float32]:
        buf = self.read(which)
        for info in self.tensors:
            if info.name == name:
                return buf[info.offset : info.offset + info.numel].reshape(info.shape)
        raise KeyError(name)

    def wte_range(self) -> tuple[int, int] | None:
        offset, count = ctypes.c_size_t(), ctypes.c_size_t()
        if not self.lib.lib.gt_stage_wte_range(self.handle, ctypes.byref(offset),
                                               ctypes.byref(count)):
            return None
        return int(offset.value), int(count.value)

    def load(self, path: Path, which: Buffer = Buffer.PARAMS) -> None:
        self.lib.check(self.lib.lib.gt_stage_load(self.handle, str(path).encode(), int(which)))

    # compute -------------------------------------------------------------------------------
    def activation(self) -> Any:
        torch = self._torch
        return torch.empty((self.batch, self.seq_len, self.config.n_embd), dtype=torch.bfloat16,
                           device="cuda")

    def forward(self, slot: int, *, tokens: npt.NDArray[np.int32] | None = None,
                x_in: Any = None, targets: npt.NDArray[np.int32] | None = None) -> Any:
        """Returns the loss (last stage) or the output activation tensor."""
        shape = (self.batch, self.seq_len)
        loss = ctypes.c_float()
        x_out = None if self.is_last else self.activation()
        self.lib.check(self.lib.lib.gt_stage_forward(
            self.handle, slot, _i32(tokens if self.is_first else None, shape, "tokens"),
            _ptr(x_in), _ptr(x_out), _i32(targets if self.is_last else None, shape, "targets"),
            ctypes.byref(loss) if self.is_last else None))
        return float(loss.value) if self.is_last else x_out

    def backward(self, slot: int, dx_out: Any = None, loss_scale: float = 1.0) -> Any:
        dx_in = None if self.is_first else self.activation()
        self.lib.check(self.lib.lib.gt_stage_backward(self.handle, slot, _ptr(dx_out),
                                                      _ptr(dx_in), loss_scale))
        return dx_in

    def backward_input(self, slot: int, dx_out: Any = None, loss_scale: float = 1.0) -> Any:
        dx_in = None if self.is_first else self.activation()
        self.lib.check(self.lib.lib.gt_stage_backward_input(self.handle, slot, _ptr(dx_out),
                                                            _ptr(dx_in), loss_scale))
        return dx_in

    def backward_weight(self, slot: int) -> None:
        self.lib.check(self.lib.lib.gt_stage_backward_weight(self.handle, slot))

    def zero_grad(self) -> None:
        self.lib.check(self.lib.lib.gt_stage_zero_grad(self.handle))

    def grad_sq_sum(self, include_wte: bool = True) -> float:
        out = ctypes.c_double()
        self.lib.check(self.lib.lib.gt_stage_grad_sq_sum(self.handle, int(include_wte),
                                                         ctypes.byref(out)))
        return float(out.value)

    def adamw_step(self, lr: float, beta1: float, beta2: float, eps: float, weight_decay: float,
                   step_t: int, grad_scale: float) -> None:
        self.lib.check(self.lib.lib.gt_stage_adamw_step(self.handle, lr, beta1, beta2, eps,
                                                        weight_decay, step_t, grad_scale))

    def synchronize(self) -> None:
        self.lib.check(self.lib.lib.gt_stage_synchronize(self.handle))
