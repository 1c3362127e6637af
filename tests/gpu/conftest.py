"""Fixtures of the GPU tests: skip cleanly without a CUDA GPU; the CUDA library built once;
``nccl_lib``, the NCCL build for
the `gantry train` tests.

``GANTRY_CUDA_LIB`` names an already built CUDA ``libgantry_native.so``; otherwise it is built
with CMake into ``native/build-cuda`` (cuDNN attention when ``GANTRY_CUDNN_FRONTEND_DIR`` names
the cudnn-frontend headers, else the reference attention only).
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from launcher.native.binding import NativeLibrary

REPO = Path(__file__).resolve().parents[2]


def _gpu_reason() -> str | None:
    try:
        import torch
    except ImportError:
        return "torch is not installed"
    if not torch.cuda.is_available():
        return "no CUDA GPU visible to torch"
    return None


@pytest.fixture(scope="session")
def cuda_lib() -> NativeLibrary:
    reason = _gpu_reason()
    if reason is not None:
        pytest.skip(f"GPU test: {reason}")
    from launcher.native.cuda_stage import load_cuda_library

    given = os.environ.get("GANTRY_CUDA_LIB")
    if given:
        return load_cuda_library(Path(given))
    if shutil.which("nvcc") is None or shutil.which("cmake") is None:
        pytest.skip("GPU test: nvcc or cmake not found to build the CUDA library")
    build = REPO / "native" / "build-cuda"
    frontend = os.environ.get("GANTRY_CUDNN_FRONTEND_DIR", "")
    configure = ["cmake", "-S", str(REPO / "native"), "-B", str(build),
                 "-DCMAKE_BUILD_TYPE=Release", "-DGANTRY_BACKEND=cuda", "-DGANTRY_NCCL=OFF"]
    configure += [f"-DGANTRY_CUDNN_FRONTEND_DIR={frontend}"] if frontend else ["-DGANTRY_CUDNN=OFF"]
    subprocess.run(configure, check=True, capture_output=True, text=True)
    subprocess.run(["cmake", "--build", str(build), "-j", str(os.cpu_count() or 1)], check=True,
                   capture_output=True, text=True)
    return load_cuda_library(build / "libgantry_native.so")


@pytest.fixture(scope="module")
def nccl_lib() -> Path:
    """The CUDA library built with NCCL that GANTRY_CUDA_LIB names, on a machine with a GPU
    (else skip): the `gantry train` tests run it, under mpirun where they need several ranks;
    a test that needs more GPUs than one says so with `need_gpus`."""
    import torch

    if not torch.cuda.is_available():
        pytest.skip("GPU test: no CUDA GPU visible to torch")
    given = os.environ.get("GANTRY_CUDA_LIB")
    if not given:
        pytest.skip("GPU test: set GANTRY_CUDA_LIB to a CUDA library built with NCCL")
    return Path(given)
