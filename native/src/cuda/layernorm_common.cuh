/*
 * layernorm_common.cuh — the register-cached LayerNorm rows shared by layernorm_forward.cu and
 * layernorm_backward.cu: the vector width, the vectors a lane holds and the launch of a kernel
 * template instantiated per vectors-per-lane count.
 */
#ifndef GANTRY_CUDA_LAYERNORM_COMMON_CUH
#define GANTRY_CUDA_LAYERNORM_COMMON_CUH

#include "kernels_common.cuh"

/* Vectorized LayerNorm rows: C % 8 == 0 and C <= 32 * 8 * LN_MAX_VEC, 16-byte aligned pointers. */
#define LN_VEC 8     /* bf16 per 16-byte vector */
#define LN_MAX_VEC 8 /* register-cached vectors per lane: C <= 2048 */

/* Vectors per lane for the register-cached LayerNorm kernels, or 0 for the scalar fallback. */
static inline int ln_vec_per_lane(int C) {
    if (C <= 0 || C % LN_VEC != 0) return 0;
    int k = (C / LN_VEC + WARP - 1) / WARP;
    return k <= LN_MAX_VEC ? k : 0;
}

#define LN_DISPATCH(K, KERNEL, GRID, STREAM, ...)                                                 \
    switch (K) {                                                                                   \
    case 1: KERNEL<1><<<GRID, 256, 0, STREAM>>>(__VA_ARGS__); break;                               \
    case 2: KERNEL<2><<<GRID, 256, 0, STREAM>>>(__VA_ARGS__); break;                               \
    case 3: KERNEL<3><<<GRID, 256, 0, STREAM>>>(__VA_ARGS__); break;                               \
    case 4: KERNEL<4><<<GRID, 256, 0, STREAM>>>(__VA_ARGS__); break;                               \
    case 5: KERNEL<5><<<GRID, 256, 0, STREAM>>>(__VA_ARGS__); break;                               \
    case 6: KERNEL<6><<<GRID, 256, 0, STREAM>>>(__VA_ARGS__); break;                               \
    case 7: KERNEL<7><<<GRID, 256, 0, STREAM>>>(__VA_ARGS__); break;                               \
    default: KERNEL<8><<<GRID, 256, 0, STREAM>>>(__VA_ARGS__); break;                              \
    }

#endif /* GANTRY_CUDA_LAYERNORM_COMMON_CUH */
