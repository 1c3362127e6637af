/*
 * kernels_common.cuh — what the CUDA kernel files of a stage share (included by each .cu of
 * native/src/cuda and by the dev tools): the bf16 type, warp reductions, 16-byte bf16 vectors,
 * alignment tests and the grid of the grid-stride launches (the device's SM count, read once by
 * gt_cu_kernels_init in convert.cu).
 */
#ifndef GANTRY_CUDA_KERNELS_COMMON_CUH
#define GANTRY_CUDA_KERNELS_COMMON_CUH

#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <stdint.h>

#include "kernels.h"

typedef __nv_bfloat16 bf16;

#define WARP 32

static inline unsigned ceil_div(size_t a, size_t b) { return (unsigned)((a + b - 1) / b); }

__device__ __forceinline__ float warp_sum(float v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}
__device__ __forceinline__ float warp_max(float v) {
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

/* SMs of the current device (gt_cu_kernels_init, convert.cu); 0 before it. */
extern int g_sms;

/* grid-stride launches: at most 32 blocks of 256 threads per SM */
static inline unsigned grid_for(size_t n) {
    size_t g = (n + 255) / 256, cap = (size_t)(g_sms > 0 ? g_sms : 1) * 32;
    if (g > cap) g = cap;
    return (unsigned)(g ? g : 1);
}

/* 16-byte vectors of 8 bf16 (uint4), little-endian: element 2i is the low half of word i.
 * bf16 -> fp32 is exact (the 16 bits on top of a zero mantissa tail); fp32 -> bf16 rounds to
 * nearest even like __float2bfloat16. */
__device__ __forceinline__ void bf16x8_unpack(const uint4 &u, float f[8]) {
    const unsigned w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
    for (int i = 0; i < 4; i++) {
        f[2 * i] = __uint_as_float(w[i] << 16);
        f[2 * i + 1] = __uint_as_float(w[i] & 0xffff0000u);
    }
}
__device__ __forceinline__ unsigned bf16x2_pack(float lo, float hi) {
    return (unsigned)__bfloat16_as_ushort(__float2bfloat16(lo)) |
           ((unsigned)__bfloat16_as_ushort(__float2bfloat16(hi)) << 16);
}
__device__ __forceinline__ uint4 bf16x8_pack(const float f[8]) {
    return make_uint4(bf16x2_pack(f[0], f[1]), bf16x2_pack(f[2], f[3]), bf16x2_pack(f[4], f[5]),
                      bf16x2_pack(f[6], f[7]));
}

static inline int aligned16(const void *p) { return ((uintptr_t)p & 15u) == 0; }
static inline int aligned8(const void *p) { return ((uintptr_t)p & 7u) == 0; }

#endif /* GANTRY_CUDA_KERNELS_COMMON_CUH */
