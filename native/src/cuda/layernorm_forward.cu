/*
 * layernorm_forward.cu — LayerNorm forward, alone or with the residual add before it in the same
 * pass over the rows, and the constant column the layers' LayerNorm outputs carry (kernels.h).
 * One warp per row: rows of C % 8 == 0, C <= 2048 and 16-byte aligned pointers are held in
 * registers (each element read once); others take the scalar fallback.
 */
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "layernorm_common.cuh"

/* ------------------------------------------------------------------------------------------ */
/* LayerNorm                                                                                   */

/* Scalar fallback (misaligned pointers, C % 8 != 0 or C > 32 * 8 * LN_MAX_VEC): one warp per
 * row, lane handles columns lane, lane + 32, ...; the row is read from global memory per pass. */
__global__ void layernorm_forward_kernel(bf16 *out, int out_ld, float *mean, float *rstd,
                                         const bf16 *inp, const bf16 *w, const bf16 *b, int N,
                                         int C) {
    int row = blockIdx.x * (blockDim.x / WARP) + threadIdx.x / WARP;
    int lane = threadIdx.x % WARP;
    if (row >= N) return;
    const bf16 *x = inp + (size_t)row * C;
    float sum = 0.0f;
    for (int c = lane; c < C; c += WARP) sum += __bfloat162float(x[c]);
    float m = warp_sum(sum) / C;
    float var = 0.0f;
    for (int c = lane; c < C; c += WARP) {
        float d = __bfloat162float(x[c]) - m;
        var += d * d;
    }
    float s = rsqrtf(warp_sum(var) / C + 1e-5f);
    bf16 *o = out + (size_t)row * out_ld;
    for (int c = lane; c < C; c += WARP) {
        float n = (__bfloat162float(x[c]) - m) * s;
        o[c] = __float2bfloat16(n * __bfloat162float(w[c]) + __bfloat162float(b[c]));
    }
    if (lane == 0) {
        mean[row] = m;
        rstd[row] = s;
    }
}

/* one warp per row; lane handles the 16-byte vectors v = lane + 32 k (k < K, v < C / 8) of the
 * row, held in registers across the mean, variance and output passes (each element read once) */
template <int K>
__global__ void __launch_bounds__(256)
    layernorm_forward_vec_kernel(bf16 *out, int out_ld, float *mean, float *rstd,
                                 const bf16 *inp, const bf16 *w, const bf16 *b, int N, int C,
                                 const bf16 *add, bf16 *sum_out) {
    int row = blockIdx.x * (blockDim.x / WARP) + threadIdx.x / WARP;
    int lane = threadIdx.x % WARP;
    if (row >= N) return;
    const int nv = C / LN_VEC;
    const uint4 *x = reinterpret_cast<const uint4 *>(inp + (size_t)row * C);
    uint4 xv[K];
#pragma unroll
    for (int k = 0; k < K; k++) {
        int v = lane + k * WARP;
        xv[k] = v < nv ? x[v] : make_uint4(0u, 0u, 0u, 0u);
    }
    if (add != nullptr) { /* the row is inp + add, rounded to bf16 and stored as sum_out */
        const uint4 *y = reinterpret_cast<const uint4 *>(add + (size_t)row * C);
        uint4 *so = reinterpret_cast<uint4 *>(sum_out + (size_t)row * C);
        uint4 yv[K];
#pragma unroll
        for (int k = 0; k < K; k++) {
            int v = lane + k * WARP;
            yv[k] = v < nv ? y[v] : make_uint4(0u, 0u, 0u, 0u);
        }
#pragma unroll
        for (int k = 0; k < K; k++) {
            int v = lane + k * WARP;
            if (v < nv) {
                float f[LN_VEC], g[LN_VEC];
                bf16x8_unpack(xv[k], f);
                bf16x8_unpack(yv[k], g);
#pragma unroll
                for (int j = 0; j < LN_VEC; j++) f[j] += g[j];
                xv[k] = bf16x8_pack(f);
                so[v] = xv[k];
            }
        }
    }
    float sum = 0.0f;
#pragma unroll
    for (int k = 0; k < K; k++) {
        if (lane + k * WARP < nv) {
            float f[LN_VEC];
            bf16x8_unpack(xv[k], f);
#pragma unroll
            for (int j = 0; j < LN_VEC; j++) sum += f[j];
        }
    }
    float m = warp_sum(sum) / C;
    float var = 0.0f;
#pragma unroll
    for (int k = 0; k < K; k++) {
        if (lane + k * WARP < nv) {
            float f[LN_VEC];
            bf16x8_unpack(xv[k], f);
#pragma unroll
            for (int j = 0; j < LN_VEC; j++) {
                float d = f[j] - m;
                var += d * d;
            }
        }
    }
    float s = rsqrtf(warp_sum(var) / C + 1e-5f);
    const uint4 *wv = reinterpret_cast<const uint4 *>(w);
    const uint4 *bv = reinterpret_cast<const uint4 *>(b);
    uint4 *o = reinterpret_cast<uint4 *>(out + (size_t)row * out_ld);
#pragma unroll
    for (int k = 0; k < K; k++) {
        int v = lane + k * WARP;
        if (v < nv) {
            float f[LN_VEC], fw[LN_VEC], fb[LN_VEC];
            bf16x8_unpack(xv[k], f);
            bf16x8_unpack(wv[v], fw);
            bf16x8_unpack(bv[v], fb);
#pragma unroll
            for (int j = 0; j < LN_VEC; j++) {
                float n = (f[j] - m) * s;
                f[j] = n * fw[j] + fb[j];
            }
            o[v] = bf16x8_pack(f);
        }
    }
    if (lane == 0) {
        mean[row] = m;
        rstd[row] = s;
    }
}

extern "C" cudaError_t gt_cu_layernorm_forward(gt_bf16 *out, int out_ld, float *mean,
                                               float *rstd, const gt_bf16 *inp, const gt_bf16 *w,
                                               const gt_bf16 *b, int N, int C,
                                               cudaStream_t stream) {
    return gt_cu_layernorm_forward_residual(out, out_ld, mean, rstd, NULL, inp, NULL, w, b, N, C,
                                            stream);
}

extern "C" cudaError_t gt_cu_layernorm_forward_residual(gt_bf16 *out, int out_ld, float *mean,
                                                        float *rstd, gt_bf16 *sum,
                                                        const gt_bf16 *inp, const gt_bf16 *add,
                                                        const gt_bf16 *w, const gt_bf16 *b,
                                                        int N, int C, cudaStream_t stream) {
    if (out_ld < C) return cudaErrorInvalidValue;
    int K = ln_vec_per_lane(C);
    if (K > 0 && out_ld % LN_VEC == 0 && aligned16(out) && aligned16(inp) && aligned16(w) &&
        aligned16(b) && aligned16(sum) && aligned16(add)) {
        LN_DISPATCH(K, layernorm_forward_vec_kernel, ceil_div(N, 8), stream, (bf16 *)out,
                    out_ld, mean, rstd, (const bf16 *)inp, (const bf16 *)w, (const bf16 *)b, N,
                    C, (const bf16 *)add, (bf16 *)sum);
    } else if (add != NULL) {
        /* the same bits in two passes: the rounded sum, then the LayerNorm of it */
        cudaError_t err = gt_cu_residual_forward(sum, inp, add, (size_t)N * C, stream);
        if (err != cudaSuccess) return err;
        return gt_cu_layernorm_forward(out, out_ld, mean, rstd, sum, w, b, N, C, stream);
    } else {
        layernorm_forward_kernel<<<ceil_div(N, 8), 256, 0, stream>>>(
            (bf16 *)out, out_ld, mean, rstd, (const bf16 *)inp, (const bf16 *)w,
            (const bf16 *)b, N, C);
    }
    return cudaGetLastError();
}

/* one thread per row: x[row * ld + col] = 1, then zeros up to the row's end */
__global__ void set_ones_column_kernel(bf16 *x, int rows, int ld, int col) {
    int row = blockIdx.x * blockDim.x + threadIdx.x;
    if (row >= rows) return;
    bf16 *r = x + (size_t)row * ld;
    r[col] = __float2bfloat16(1.0f);
    for (int c = col + 1; c < ld; c++) r[c] = __float2bfloat16(0.0f);
}

extern "C" cudaError_t gt_cu_set_ones_column(gt_bf16 *x, int rows, int ld, int col,
                                             cudaStream_t stream) {
    if (rows < 1 || col < 0 || col >= ld) return cudaErrorInvalidValue;
    set_ones_column_kernel<<<ceil_div(rows, 256), 256, 0, stream>>>((bf16 *)x, rows, ld, col);
    return cudaGetLastError();
}
