/*
 * cuda_check.h — check macros for CUDA runtime, cuBLASLt and NCCL calls in the CUDA backend's C
 * files. Each records "<call> failed: <library message>" plus file:line through GT_FAIL (see
 * common.h) and jumps to the function's one cleanup label; nothing exits the process.
 */
#ifndef GANTRY_CUDA_CHECK_H
#define GANTRY_CUDA_CHECK_H

#include <cuda_runtime_api.h>

#include "common.h"

/* A CUDA runtime call (or a kernel launcher returning cudaError_t). */
#define CUDA_CHECK(call)                                                                       \
    do {                                                                                       \
        cudaError_t cuda_rc_ = (call);                                                         \
        if (cuda_rc_ != cudaSuccess)                                                           \
            GT_FAIL(GT_ESTATE, "%s failed: %s (%s)", #call, cudaGetErrorName(cuda_rc_),        \
                    cudaGetErrorString(cuda_rc_));                                             \
    } while (0)

/* A cudaMalloc that fails with GT_ENOMEM naming the size. */
#define CUDA_MALLOC(ptr, bytes)                                                                \
    do {                                                                                       \
        size_t cuda_bytes_ = (size_t)(bytes);                                                  \
        cudaError_t cuda_rc_ = cudaMalloc((void **)&(ptr), cuda_bytes_ ? cuda_bytes_ : 16);    \
        if (cuda_rc_ != cudaSuccess) {                                                         \
            (ptr) = NULL;                                                                      \
            GT_FAIL(GT_ENOMEM, "cudaMalloc of %zu bytes failed: %s", cuda_bytes_,              \
                    cudaGetErrorString(cuda_rc_));                                             \
        }                                                                                      \
    } while (0)

#endif /* GANTRY_CUDA_CHECK_H */
