"""A CUDA-backend stage driven from Python: device activations as torch tensors.

``CudaStage`` wraps one ``gt_stage`` of a library built with ``GANTRY_BACKEND=cuda``: activations
(x_in, x_out, dx_out, dx_in) are bf16 torch CUDA tensors passed by device pointer, tokens and
targets host int32 arrays, parameter buffers copied to and from numpy with
``gt_stage_read_buffer`` / ``gt_stage_write_buffer``. What does not depend on the backend
(creation, tensor table, load, gradients) is ``binding.BaseStage``'s. Used by the GPU parity
tests and the GPU benchmark; torch with CUDA is required (imported lazily by the callers).
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
    BaseStage,
    Buffer,
    NativeLibrary,
    _i32,
    read_buffer,
    write_buffer,
)
from launcher.native.model_config import GPTConfig

_f32p = _P(ctypes.c_float)


def load_cuda_library(path: Path | None = None) -> NativeLibrary:
    """Loads the library and checks that it is the CUDA backend."""
    lib = NativeLibrary(path)
    backend = lib.lib.gt_backend_name().decode()
    if backend != "cuda":
        raise GantryError(f"{lib.path}: backend is '{backend}', expected 'cuda'")
    return lib


def _ptr(tensor: Any) -> Any:
    """Device pointer of a torch tensor, typed as the API's float*."""
    if tensor is None:
        return None
    return ctypes.cast(ctypes.c_void_p(tensor.data_ptr()), _f32p)


class CudaStage(BaseStage):
    """One stage on the GPU; ``close`` frees it."""

    _KIND = "CUDA"

    def __init__(
        self, lib: NativeLibrary, config: GPTConfig, layer_begin: int, layer_end: int, *,
        is_first: bool, is_last: bool, batch: int, seq_len: int, n_slots: int = 1,
    ) -> None:
        import torch

        self._torch = torch
        super().__init__(lib, config, layer_begin, layer_end, is_first=is_first,
                         is_last=is_last, batch=batch, seq_len=seq_len, n_slots=n_slots)
        self.info = lib.lib.gt_stage_backend_info(self.handle).decode()

    # buffers -------------------------------------------------------------------------------
    def read(self, which: Buffer) -> npt.NDArray[np.float32]:
        return read_buffer(self.lib, self.handle, which, self.num_params)

    def write(self, which: Buffer, values: npt.NDArray[np.float32]) -> None:
        data = np.ascontiguousarray(values, dtype=np.float32)
        if data.shape != (self.num_params,):
            raise GantryError(f"write: expected {self.num_params} values, got {data.shape}")
        write_buffer(self.lib, self.handle, which, 0, data)

    def tensor(self, which: Buffer, name: str) -> npt.NDArray[np.float32]:
        buf = self.read(which)
        info = self._tensor_named(name)
        return buf[info.offset : info.offset + info.numel].reshape(info.shape)

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

    def adamw_step(self, lr: float, beta1: float, beta2: float, eps: float, weight_decay: float,
                   step_t: int, grad_scale: float) -> None:
        self.lib.check(self.lib.lib.gt_stage_adamw_step(self.handle, lr, beta1, beta2, eps,
                                                        weight_decay, step_t, grad_scale))

    def synchronize(self) -> None:
        self.lib.check(self.lib.lib.gt_stage_synchronize(self.handle))
