/*
 * kernels.cu — CUDA kernels of one GPT-2 stage (see kernels.h for shapes and contracts).
 *
 * bf16 storage, fp32 math (the loss kernels are in crossentropy.cu). Row-wise kernels
 * (LayerNorm, softmax) give one warp to a row, except the default LayerNorm backward (a block
 * per group of rows, a thread per 16-byte column vector); column sums (bias and LayerNorm
 * weight gradients) are two-phase with a fixed partition, so every reduction is deterministic.
 */
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <float.h>
#include <math.h>

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

/* ------------------------------------------------------------------------------------------ */
/* conversions                                                                                 */

__global__ void f32_to_bf16_kernel(bf16 *dst, const float *src, size_t n) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        dst[i] = __float2bfloat16(src[i]);
}
__global__ void bf16_to_f32_kernel(float *dst, const bf16 *src, size_t n) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        dst[i] = __bfloat162float(src[i]);
}

/* SMs of the current device (gt_cu_kernels_init); 0 before it. */
static int g_sms = 0;

extern "C" cudaError_t gt_cu_kernels_init(void) {
    int dev = 0, sms = 0;
    cudaError_t err = cudaGetDevice(&dev);
    if (err == cudaSuccess) err = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev);
    if (err != cudaSuccess) return err;
    g_sms = sms > 0 ? sms : 1;
    return cudaSuccess;
}

/* grid-stride launches: at most 32 blocks of 256 threads per SM */
static unsigned grid_for(size_t n) {
    size_t g = (n + 255) / 256, cap = (size_t)(g_sms > 0 ? g_sms : 1) * 32;
    if (g > cap) g = cap;
    return (unsigned)(g ? g : 1);
}

extern "C" cudaError_t gt_cu_f32_to_bf16(gt_bf16 *dst, const float *src, size_t n,
                                         cudaStream_t stream) {
    f32_to_bf16_kernel<<<grid_for(n), 256, 0, stream>>>((bf16 *)dst, src, n);
    return cudaGetLastError();
}
extern "C" cudaError_t gt_cu_bf16_to_f32(float *dst, const gt_bf16 *src, size_t n,
                                         cudaStream_t stream) {
    bf16_to_f32_kernel<<<grid_for(n), 256, 0, stream>>>(dst, (const bf16 *)src, n);
    return cudaGetLastError();
}

/* ------------------------------------------------------------------------------------------ */
/* embeddings                                                                                  */

__global__ void encoder_forward_kernel(bf16 *out, const int32_t *tokens, const bf16 *wte,
                                       const bf16 *wpe, int B, int T, int C) {
    size_t total = (size_t)B * T * C;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < total;
         i += (size_t)gridDim.x * blockDim.x) {
        size_t row = i / C;
        int c = (int)(i % C), t = (int)(row % T);
        float v = __bfloat162float(wte[(size_t)tokens[row] * C + c]) +
                  __bfloat162float(wpe[(size_t)t * C + c]);
        out[i] = __float2bfloat16(v);
    }
}

/* one block per (unique token); threads over channels; positions summed in increasing order */
__global__ void encoder_backward_wte_kernel(float *dwte, const bf16 *dout, const int32_t *tok,
                                            const int32_t *start, const int32_t *pos,
                                            const int32_t *n_groups, int C) {
    int g = blockIdx.x;
    if (g >= *n_groups) return; /* launched for the most groups a micro-batch can have */
    int s = start[g], e = start[g + 1];
    float *row = dwte + (size_t)tok[g] * C;
    for (int c = threadIdx.x; c < C; c += blockDim.x) {
        float acc = 0.0f;
        for (int j = s; j < e; j++) acc += __bfloat162float(dout[(size_t)pos[j] * C + c]);
        row[c] += acc;
    }
}

/* one thread per (t, c): sum over b in order */
__global__ void encoder_backward_wpe_kernel(float *dwpe, const bf16 *dout, int B, int T, int C) {
    size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    if (i >= (size_t)T * C) return;
    float acc = 0.0f;
    for (int b = 0; b < B; b++) acc += __bfloat162float(dout[(size_t)b * T * C + i]);
    dwpe[i] += acc;
}

extern "C" cudaError_t gt_cu_encoder_forward(gt_bf16 *out, const int32_t *tokens,
                                             const gt_bf16 *wte, const gt_bf16 *wpe, int B,
                                             int T, int C, cudaStream_t stream) {
    encoder_forward_kernel<<<grid_for((size_t)B * T * C), 256, 0, stream>>>(
        (bf16 *)out, tokens, (const bf16 *)wte, (const bf16 *)wpe, B, T, C);
    return cudaGetLastError();
}

extern "C" cudaError_t gt_cu_encoder_backward(float *dwte, float *dwpe, const gt_bf16 *dout,
                                              const int32_t *group_token,
                                              const int32_t *group_start,
                                              const int32_t *group_pos,
                                              const int32_t *n_groups, int max_groups, int B,
                                              int T, int C, cudaStream_t stream) {
    if (max_groups > 0)
        encoder_backward_wte_kernel<<<max_groups, 256, 0, stream>>>(
            dwte, (const bf16 *)dout, group_token, group_start, group_pos, n_groups, C);
    cudaError_t err = cudaGetLastError();
    if (err != cudaSuccess) return err;
    encoder_backward_wpe_kernel<<<ceil_div((size_t)T * C, 256), 256, 0, stream>>>(
        dwpe, (const bf16 *)dout, B, T, C);
    return cudaGetLastError();
}

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

/* scalar fallback of layernorm_backward_input_vec_kernel: one warp per row, lane-strided columns */
__global__ void layernorm_backward_input_kernel(bf16 *dinp, const bf16 *dresid, const bf16 *dout,
                                                const bf16 *inp, const float *mean,
                                                const float *rstd, const bf16 *w, int N, int C) {
    int row = blockIdx.x * (blockDim.x / WARP) + threadIdx.x / WARP;
    int lane = threadIdx.x % WARP;
    if (row >= N) return;
    size_t base = (size_t)row * C;
    float m = mean[row], s = rstd[row];
    float dsum = 0.0f, dxsum = 0.0f;
    for (int c = lane; c < C; c += WARP) {
        float dn = __bfloat162float(w[c]) * __bfloat162float(dout[base + c]);
        float xhat = (__bfloat162float(inp[base + c]) - m) * s;
        dsum += dn;
        dxsum += dn * xhat;
    }
    dsum = warp_sum(dsum) / C;
    dxsum = warp_sum(dxsum) / C;
    for (int c = lane; c < C; c += WARP) {
        float dn = __bfloat162float(w[c]) * __bfloat162float(dout[base + c]);
        float xhat = (__bfloat162float(inp[base + c]) - m) * s;
        float dx = s * (dn - dsum - xhat * dxsum);
        float r = dresid ? __bfloat162float(dresid[base + c]) : 0.0f;
        dinp[base + c] = __float2bfloat16(r + dx);
    }
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

/* Vectorized LayerNorm rows: C % 8 == 0 and C <= 32 * 8 * LN_MAX_VEC, 16-byte aligned pointers. */
#define LN_VEC 8     /* bf16 per 16-byte vector */
#define LN_MAX_VEC 8 /* register-cached vectors per lane: C <= 2048 */

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

/* acc[0..1] (8 floats) += f */
__device__ __forceinline__ void add8(float4 *acc, const float f[8]) {
    float4 a0 = acc[0], a1 = acc[1];
    a0.x += f[0], a0.y += f[1], a0.z += f[2], a0.w += f[3];
    a1.x += f[4], a1.y += f[5], a1.z += f[6], a1.w += f[7];
    acc[0] = a0, acc[1] = a1;
}

/* One row of the LayerNorm backward by one warp: lane handles the 16-byte vectors
 * v = lane + 32 k (k < K, v < C / 8); dout, inp and dresid (if any) are loaded into registers
 * before any store and kept across both passes, w re-read (L1-resident); each vector is read and
 * written by one lane only, so dinp may alias dresid. dinp = dresid + d LN / d inp. With ACC,
 * the lane also adds dout and dout * xhat of its columns into acc_d / acc_x (float4 pairs per
 * vector, owned by this lane: no other thread touches them); with SUMS also dresid into acc_r
 * and the stored dinp into acc_o (column sums of the gradients the bias products need). */
template <int K, bool ACC, bool SUMS = false>
__device__ __forceinline__ void layernorm_backward_row(bf16 *dinp, const bf16 *dresid,
                                                       const bf16 *dout, const bf16 *inp,
                                                       float m, float s, const uint4 *wv,
                                                       int row, int lane, int C, float4 *acc_d,
                                                       float4 *acc_x, float4 *acc_r = NULL,
                                                       float4 *acc_o = NULL) {
    const int nv = C / LN_VEC;
    size_t base = (size_t)row * C;
    const uint4 *dg = reinterpret_cast<const uint4 *>(dout + base);
    const uint4 *xg = reinterpret_cast<const uint4 *>(inp + base);
    const uint4 *rg = dresid ? reinterpret_cast<const uint4 *>(dresid + base) : NULL;
    /* all loads of the row up front (dresid too: it may alias dinp, whose stores would
     * otherwise keep the compiler from hoisting these loads) */
    uint4 dv[K], xv[K], rv[K];
#pragma unroll
    for (int k = 0; k < K; k++) {
        int v = lane + k * WARP;
        dv[k] = v < nv ? dg[v] : make_uint4(0u, 0u, 0u, 0u);
        xv[k] = v < nv ? xg[v] : make_uint4(0u, 0u, 0u, 0u);
        rv[k] = rg != NULL && v < nv ? rg[v] : make_uint4(0u, 0u, 0u, 0u);
    }
    float dsum = 0.0f, dxsum = 0.0f;
#pragma unroll
    for (int k = 0; k < K; k++) {
        int v = lane + k * WARP;
        if (v < nv) {
            float fd[LN_VEC], fx[LN_VEC], fw[LN_VEC], xh[LN_VEC];
            bf16x8_unpack(dv[k], fd);
            bf16x8_unpack(xv[k], fx);
            bf16x8_unpack(wv[v], fw);
#pragma unroll
            for (int j = 0; j < LN_VEC; j++) {
                xh[j] = (fx[j] - m) * s;
                float dn = fw[j] * fd[j];
                dsum += dn;
                dxsum += dn * xh[j];
            }
            if (ACC) {
                float4 ad0 = acc_d[2 * v], ad1 = acc_d[2 * v + 1];
                float4 ax0 = acc_x[2 * v], ax1 = acc_x[2 * v + 1];
                ad0.x += fd[0], ad0.y += fd[1], ad0.z += fd[2], ad0.w += fd[3];
                ad1.x += fd[4], ad1.y += fd[5], ad1.z += fd[6], ad1.w += fd[7];
                ax0.x += fd[0] * xh[0], ax0.y += fd[1] * xh[1];
                ax0.z += fd[2] * xh[2], ax0.w += fd[3] * xh[3];
                ax1.x += fd[4] * xh[4], ax1.y += fd[5] * xh[5];
                ax1.z += fd[6] * xh[6], ax1.w += fd[7] * xh[7];
                acc_d[2 * v] = ad0, acc_d[2 * v + 1] = ad1;
                acc_x[2 * v] = ax0, acc_x[2 * v + 1] = ax1;
            }
        }
    }
    dsum = warp_sum(dsum) / C;
    dxsum = warp_sum(dxsum) / C;
    uint4 *og = reinterpret_cast<uint4 *>(dinp + base);
#pragma unroll
    for (int k = 0; k < K; k++) {
        int v = lane + k * WARP;
        if (v < nv) {
            float fd[LN_VEC], fx[LN_VEC], fw[LN_VEC], fr[LN_VEC];
            bf16x8_unpack(dv[k], fd);
            bf16x8_unpack(xv[k], fx);
            bf16x8_unpack(wv[v], fw);
            bf16x8_unpack(rv[k], fr); /* zeros without dresid: +0.0f + dx == dx */
            if (SUMS) add8(acc_r + 2 * v, fr);
#pragma unroll
            for (int j = 0; j < LN_VEC; j++) {
                float dn = fw[j] * fd[j];
                float xhat = (fx[j] - m) * s;
                float dx = s * (dn - dsum - xhat * dxsum);
                fr[j] = fr[j] + dx;
            }
            uint4 packed = bf16x8_pack(fr);
            og[v] = packed;
            if (SUMS) { /* the column sum of what was stored: the bf16 values */
                bf16x8_unpack(packed, fr);
                add8(acc_o + 2 * v, fr);
            }
        }
    }
}

/* one warp per row (layernorm_backward_row) */
template <int K>
__global__ void __launch_bounds__(256)
    layernorm_backward_input_vec_kernel(bf16 *dinp, const bf16 *dresid, const bf16 *dout,
                                        const bf16 *inp, const float *mean, const float *rstd,
                                        const bf16 *w, int N, int C) {
    int row = blockIdx.x * (blockDim.x / WARP) + threadIdx.x / WARP;
    int lane = threadIdx.x % WARP;
    if (row >= N) return;
    layernorm_backward_row<K, false>(dinp, dresid, dout, inp, mean[row], rstd[row],
                                     reinterpret_cast<const uint4 *>(w), row, lane, C, NULL,
                                     NULL);
}

static inline int aligned16(const void *p) { return ((uintptr_t)p & 15u) == 0; }

/* Warps per block of the warp-per-row LayerNorm backward (impl 1). */
#define LN_BWD_WARPS 2

/* LayerNorm backward impl 1, input and weight gradients in one pass (layernorm_backward_row
 * with the column sums of gt_cu_layernorm_backward_weight): block b of LN_BWD_WARPS warps owns
 * rows [b R, b R + R) (R = rows_per_block), warp w takes rows b R + w, b R + w + LN_BWD_WARPS,
 * ... in increasing order. A lane owns the same columns in every row (the 16-byte vectors
 * lane + 32 k), so it adds its columns into its warp's shared-memory accumulators without any
 * other thread touching them; at the end the block adds its warps in order and writes sum q of
 * block b to partial[(q * G + b) * C + c], G = gridDim.x, q = 0: dout, 1: dout * xhat, and with
 * SUMS 2: dresid, 3: dinp; colsum_finish_kernel<32> adds the blocks. Deterministic: fixed
 * orders. */
template <int K, bool SUMS>
__global__ void __launch_bounds__(LN_BWD_WARPS * WARP)
    layernorm_backward_fused_kernel(bf16 *dinp, const bf16 *dresid, const bf16 *dout,
                                    const bf16 *inp, const float *mean, const float *rstd,
                                    const bf16 *w, float *partial, int N, int C,
                                    int rows_per_block) {
    constexpr int NSUM = SUMS ? 4 : 2;
    extern __shared__ float4 ln_acc_sh[]; /* [LN_BWD_WARPS][NSUM][C / 4] */
    const int warp = threadIdx.x / WARP, lane = threadIdx.x % WARP;
    const int nv = C / LN_VEC;
    float4 *acc = ln_acc_sh + (size_t)warp * NSUM * (C / 4);
    const uint4 *wv = reinterpret_cast<const uint4 *>(w);
#pragma unroll
    for (int k = 0; k < K; k++) {
        int v = lane + k * WARP;
        if (v < nv) {
#pragma unroll
            for (int q = 0; q < NSUM; q++)
                acc[q * (C / 4) + 2 * v] = acc[q * (C / 4) + 2 * v + 1] =
                    make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        }
    }
    const int r_end = min(N, ((int)blockIdx.x + 1) * rows_per_block);
    for (int row = (int)blockIdx.x * rows_per_block + warp; row < r_end; row += LN_BWD_WARPS)
        layernorm_backward_row<K, true, SUMS>(dinp, dresid, dout, inp, mean[row], rstd[row], wv,
                                              row, lane, C, acc, acc + C / 4,
                                              SUMS ? acc + 2 * (C / 4) : NULL,
                                              SUMS ? acc + 3 * (C / 4) : NULL);
    __syncthreads();
    const float *sh = reinterpret_cast<const float *>(ln_acc_sh);
    for (int i = threadIdx.x; i < NSUM * C; i += blockDim.x) { /* i = q * C + c */
        float total = 0.0f;
#pragma unroll
        for (int q = 0; q < LN_BWD_WARPS; q++) total += sh[(size_t)q * NSUM * C + i];
        int which = i / C, c = i % C;
        partial[((size_t)which * gridDim.x + blockIdx.x) * C + c] = total;
    }
}

/* ---- block-cooperative LayerNorm rows (backward impl 2) ----
 * A block of nv = C / 8 threads (rounded up to whole warps, <= 256 since C <= 2048): thread v
 * owns the 16-byte column vector v (columns 8v .. 8v+7) of every row. The block takes R rows
 * at a time: all R rows' vectors are loaded before any arithmetic (R x 16 bytes per input in
 * flight per thread), each row's sums are reduced with warp shuffles, then across the warps in
 * one shared-memory pass (warps added in order: deterministic). The reduction buffers alternate
 * between two halves, so one __syncthreads per reduction suffices: a warp can only rewrite a
 * half after every warp passed the barrier behind the reads of it. */
#define LN_BLOCK_MAX_WARPS 8 /* 256 threads: C <= 2048 */

/* Adds each of the R per-thread partials a[i], b[i] over the block; every thread gets the
 * totals. red: [2 halves][LN_BLOCK_MAX_WARPS][R] float2 in shared memory, half = parity. */
template <int R>
__device__ __forceinline__ void ln_block_sum2(float a[R], float b[R], float2 (*red)[LN_BLOCK_MAX_WARPS][R],
                                              int half) {
    const int warp = threadIdx.x / WARP, lane = threadIdx.x % WARP, nwarps = blockDim.x / WARP;
#pragma unroll
    for (int i = 0; i < R; i++) {
        a[i] = warp_sum(a[i]);
        b[i] = warp_sum(b[i]);
    }
    if (lane == 0) {
#pragma unroll
        for (int i = 0; i < R; i++) red[half][warp][i] = make_float2(a[i], b[i]);
    }
    __syncthreads();
#pragma unroll
    for (int i = 0; i < R; i++) {
        float2 t = red[half][0][i];
        for (int q = 1; q < nwarps; q++) {
            float2 u = red[half][q][i];
            t.x += u.x, t.y += u.y;
        }
        a[i] = t.x, b[i] = t.y;
    }
}

/* Blocks of 256 threads per SM the backward's registers are bounded for (two: 128 registers;
 * ptxas -v: no spills with R = 4 without the sums and R = 2 with them). */
#define LN_BWD_BLOCK_MIN_BLOCKS 2

/* p[0..7] = f (p 16-byte aligned) */
__device__ __forceinline__ void store8(float *p, const float f[8]) {
    reinterpret_cast<float4 *>(p)[0] = make_float4(f[0], f[1], f[2], f[3]);
    reinterpret_cast<float4 *>(p)[1] = make_float4(f[4], f[5], f[6], f[7]);
}

/* LayerNorm backward (input and weight gradients, optionally the two bias sums), block-
 * cooperative: block b owns rows [b P, b P + P) (P = rows_per_block, a multiple of R), taken
 * R at a time in increasing order. dout, inp and dresid of the group are loaded before any
 * store (each vector is read and written by its owning thread only, so dinp may alias dresid).
 * Column sums stay in registers (thread v: its 8 columns; rows in order) and go to
 * partial[(q * G + b) * C + c] at the end, q = 0: dout, 1: dout * xhat, with SUMS 2: dresid,
 * 3: the stored dinp; colsum_finish_kernel<32> adds the blocks in order. */
template <int R, bool SUMS, bool PREFETCH>
__global__ void __launch_bounds__(LN_BLOCK_MAX_WARPS * WARP, LN_BWD_BLOCK_MIN_BLOCKS)
    layernorm_backward_block_kernel(bf16 *dinp, const bf16 *dresid, const bf16 *dout,
                                    const bf16 *inp, const float *mean, const float *rstd,
                                    const bf16 *w, float *partial, int N, int C,
                                    int rows_per_block) {
    __shared__ float2 red[2][LN_BLOCK_MAX_WARPS][R];
    const int v = threadIdx.x, nv = C / LN_VEC;
    const bool active = v < nv;
    const uint4 zero = make_uint4(0u, 0u, 0u, 0u);
    float fw[LN_VEC];
    bf16x8_unpack(active ? reinterpret_cast<const uint4 *>(w)[v] : zero, fw);
    float acc_d[LN_VEC], acc_x[LN_VEC], acc_r[LN_VEC], acc_o[LN_VEC];
#pragma unroll
    for (int j = 0; j < LN_VEC; j++) acc_d[j] = acc_x[j] = acc_r[j] = acc_o[j] = 0.0f;
    const float inv_c = 1.0f / (float)C;
    const int r_begin = (int)blockIdx.x * rows_per_block;
    const int r_end = min(N, r_begin + rows_per_block);
    int half = 0;
    /* the group's dout, inp, mean and rstd: with PREFETCH loaded during the previous group,
     * before its block reduction (the loads of the next rows in flight across the barrier) */
    uint4 dv[R], xv[R];
    float m[R], s[R];
    auto load_group = [&](int row0, uint4 *d, uint4 *x, float *mm, float *ss) {
#pragma unroll
        for (int i = 0; i < R; i++) {
            int row = row0 + i;
            bool ok = active && row < r_end;
            size_t at = (size_t)row * nv + v; /* vector index */
            d[i] = ok ? reinterpret_cast<const uint4 *>(dout)[at] : zero;
            x[i] = ok ? reinterpret_cast<const uint4 *>(inp)[at] : zero;
            mm[i] = row < r_end ? mean[row] : 0.0f;
            ss[i] = row < r_end ? rstd[row] : 0.0f;
        }
    };
    if (PREFETCH) load_group(r_begin, dv, xv, m, s);
    for (int row0 = r_begin; row0 < r_end; row0 += R, half ^= 1) {
        uint4 rv[R];
        if (!PREFETCH) load_group(row0, dv, xv, m, s);
#pragma unroll
        for (int i = 0; i < R; i++) {
            int row = row0 + i;
            bool ok = active && row < r_end && dresid != NULL;
            rv[i] = ok ? reinterpret_cast<const uint4 *>(dresid)[(size_t)row * nv + v] : zero;
        }
        float g[R], gx[R]; /* per row: sum w dout, sum w dout xhat (this thread's columns) */
#pragma unroll
        for (int i = 0; i < R; i++) {
            float fd[LN_VEC], fx[LN_VEC];
            bf16x8_unpack(dv[i], fd);
            bf16x8_unpack(xv[i], fx);
            g[i] = gx[i] = 0.0f;
#pragma unroll
            for (int j = 0; j < LN_VEC; j++) {
                float dn = fw[j] * fd[j]; /* 0 outside the row / the columns */
                g[i] += dn;
                gx[i] += dn * ((fx[j] - m[i]) * s[i]);
            }
        }
        uint4 dn[PREFETCH ? R : 1], xn[PREFETCH ? R : 1];
        float mn[PREFETCH ? R : 1], sn[PREFETCH ? R : 1];
        if (PREFETCH) load_group(row0 + R, dn, xn, mn, sn);
        ln_block_sum2<R>(g, gx, red, half);
#pragma unroll
        for (int i = 0; i < R; i++) {
            int row = row0 + i;
            if (active && row < r_end) {
                float fd[LN_VEC], fx[LN_VEC], fr[LN_VEC];
                bf16x8_unpack(dv[i], fd);
                bf16x8_unpack(xv[i], fx);
                bf16x8_unpack(rv[i], fr); /* zeros without dresid: +0.0f + dx == dx */
                float gm = g[i] * inv_c, gxm = gx[i] * inv_c;
#pragma unroll
                for (int j = 0; j < LN_VEC; j++) {
                    float xhat = (fx[j] - m[i]) * s[i];
                    acc_d[j] += fd[j];
                    acc_x[j] += fd[j] * xhat;
                    if (SUMS) acc_r[j] += fr[j];
                    fr[j] = fr[j] + s[i] * (fw[j] * fd[j] - gm - xhat * gxm);
                }
                uint4 packed = bf16x8_pack(fr);
                reinterpret_cast<uint4 *>(dinp)[(size_t)row * nv + v] = packed;
                if (SUMS) { /* the column sum of what was stored: the bf16 values */
                    bf16x8_unpack(packed, fr);
#pragma unroll
                    for (int j = 0; j < LN_VEC; j++) acc_o[j] += fr[j];
                }
            }
        }
        if (PREFETCH) {
#pragma unroll
            for (int i = 0; i < R; i++) dv[i] = dn[i], xv[i] = xn[i], m[i] = mn[i], s[i] = sn[i];
        }
    }
    if (active) {
        const size_t G = gridDim.x, b = blockIdx.x, col = (size_t)LN_VEC * v;
        store8(partial + (0 * G + b) * C + col, acc_d);
        store8(partial + (1 * G + b) * C + col, acc_x);
        if (SUMS) {
            store8(partial + (2 * G + b) * C + col, acc_r);
            store8(partial + (3 * G + b) * C + col, acc_o);
        }
    }
}

/* Vectors per lane for the register-cached LayerNorm kernels, or 0 for the scalar fallback. */
static int ln_vec_per_lane(int C) {
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

extern "C" cudaError_t gt_cu_layernorm_backward_input(gt_bf16 *dinp, const gt_bf16 *dresid,
                                                      const gt_bf16 *dout, const gt_bf16 *inp,
                                                      const float *mean, const float *rstd,
                                                      const gt_bf16 *w, int N, int C,
                                                      cudaStream_t stream) {
    int K = ln_vec_per_lane(C);
    if (K > 0 && aligned16(dinp) && (dresid == NULL || aligned16(dresid)) && aligned16(dout) &&
        aligned16(inp) && aligned16(w)) {
        LN_DISPATCH(K, layernorm_backward_input_vec_kernel, ceil_div(N, 8), stream, (bf16 *)dinp,
                    (const bf16 *)dresid, (const bf16 *)dout, (const bf16 *)inp, mean, rstd,
                    (const bf16 *)w, N, C);
    } else {
        layernorm_backward_input_kernel<<<ceil_div(N, 8), 256, 0, stream>>>(
            (bf16 *)dinp, (const bf16 *)dresid, (const bf16 *)dout, (const bf16 *)inp, mean,
            rstd, (const bf16 *)w, N, C);
    }
    return cudaGetLastError();
}

/* Column sums, phase 1, scalar fallback (C % 4 != 0 or misaligned): block (32, 8) over 32 columns and one chunk of rows; per column the
 * partial of chunk k goes to partial[k * C + c] (and partial2 for the second sum). */
template <bool LN>
__global__ void colsum_partial_kernel(float *partial, float *partial2, const bf16 *dout,
                                      const bf16 *inp, const float *mean, const float *rstd,
                                      int N, int C, int rows_per_chunk) {
    __shared__ float s1[8][33], s2[8][33];
    int c = blockIdx.x * 32 + threadIdx.x;
    int chunk = blockIdx.y;
    int r0 = chunk * rows_per_chunk, r1 = min(N, r0 + rows_per_chunk);
    float a = 0.0f, b = 0.0f;
    if (c < C) {
        for (int r = r0 + threadIdx.y; r < r1; r += 8) {
            float d = __bfloat162float(dout[(size_t)r * C + c]);
            a += d;
            if (LN) b += d * (__bfloat162float(inp[(size_t)r * C + c]) - mean[r]) * rstd[r];
        }
    }
    s1[threadIdx.y][threadIdx.x] = a;
    s2[threadIdx.y][threadIdx.x] = b;
    __syncthreads();
    if (threadIdx.y == 0 && c < C) {
        float sa = 0.0f, sb = 0.0f;
        for (int k = 0; k < 8; k++) {
            sa += s1[k][threadIdx.x];
            sb += s2[k][threadIdx.x];
        }
        partial[(size_t)chunk * C + c] = sa;
        if (LN) partial2[(size_t)chunk * C + c] = sb;
    }
}

/* 4 bf16 packed in 8 bytes (uint2): element 2i is the low half of word i */
__device__ __forceinline__ void bf16x4_unpack(const uint2 &u, float f[4]) {
    f[0] = __uint_as_float(u.x << 16);
    f[1] = __uint_as_float(u.x & 0xffff0000u);
    f[2] = __uint_as_float(u.y << 16);
    f[3] = __uint_as_float(u.y & 0xffff0000u);
}

/* Column sums, phase 1 (C % 4 == 0, 8-byte aligned rows): block (32, 8) over 128 columns and one
 * chunk of rows; thread (x, y) sums columns 4x .. 4x+3 of the block (one 8-byte load, so a warp
 * reads 256 contiguous bytes of a row) over rows r0 + y, r0 + y + 8, ... in increasing order;
 * then thread t = 32 y + x adds the 8 row groups in order for column t % 128 of sum t / 128 and
 * writes partial[k * C + c] (sum of dout) or partial2[k * C + c] (sum of dout * xhat). */
template <bool LN>
__global__ void __launch_bounds__(256)
    colsum_partial_vec_kernel(float *partial, float *partial2, const bf16 *dout, const bf16 *inp,
                              const float *mean, const float *rstd, int N, int C,
                              int rows_per_chunk) {
    __shared__ float4 sh[2][8][32];
    int tx = threadIdx.x, ty = threadIdx.y;
    int c0 = (blockIdx.x * 32 + tx) * 4;
    int chunk = blockIdx.y;
    int r0 = chunk * rows_per_chunk, r1 = min(N, r0 + rows_per_chunk);
    float a[4] = {0.0f, 0.0f, 0.0f, 0.0f}, b[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    if (c0 < C) {
        int r = r0 + ty;
        /* 4 rows (r, r+8, r+16, r+24) loaded together, then added in row order */
        for (; r + 24 < r1; r += 32) {
            uint2 d[4], x[4];
            float mu[4], rs[4];
#pragma unroll
            for (int i = 0; i < 4; i++) {
                size_t off = (size_t)(r + 8 * i) * C + c0;
                d[i] = *reinterpret_cast<const uint2 *>(dout + off);
                if (LN) {
                    x[i] = *reinterpret_cast<const uint2 *>(inp + off);
                    mu[i] = mean[r + 8 * i];
                    rs[i] = rstd[r + 8 * i];
                }
            }
#pragma unroll
            for (int i = 0; i < 4; i++) {
                float fd[4];
                bf16x4_unpack(d[i], fd);
#pragma unroll
                for (int j = 0; j < 4; j++) a[j] += fd[j];
                if (LN) {
                    float fx[4];
                    bf16x4_unpack(x[i], fx);
#pragma unroll
                    for (int j = 0; j < 4; j++) b[j] += fd[j] * (fx[j] - mu[i]) * rs[i];
                }
            }
        }
        for (; r < r1; r += 8) {
            size_t off = (size_t)r * C + c0;
            float fd[4];
            bf16x4_unpack(*reinterpret_cast<const uint2 *>(dout + off), fd);
#pragma unroll
            for (int j = 0; j < 4; j++) a[j] += fd[j];
            if (LN) {
                float fx[4];
                bf16x4_unpack(*reinterpret_cast<const uint2 *>(inp + off), fx);
                float mu = mean[r], rs = rstd[r];
#pragma unroll
                for (int j = 0; j < 4; j++) b[j] += fd[j] * (fx[j] - mu) * rs;
            }
        }
    }
    sh[0][ty][tx] = make_float4(a[0], a[1], a[2], a[3]);
    sh[1][ty][tx] = make_float4(b[0], b[1], b[2], b[3]);
    __syncthreads();
    int t = ty * 32 + tx, which = t / 128, col = t % 128;
    int c = blockIdx.x * 128 + col;
    if (c < C && (LN || which == 0)) {
        const float *sf = reinterpret_cast<const float *>(&sh[which][0][0]);
        float acc = 0.0f;
#pragma unroll
        for (int k = 0; k < 8; k++) acc += sf[k * 128 + col];
        (which ? partial2 : partial)[(size_t)chunk * C + c] = acc;
    }
}

/* Up to four reduced vectors of one finish launch (NULL: not wanted, its partials are skipped). */
struct colsum_dsts {
    float *dst[4];
};

/* phase 2: block (32, ROWS) over 32 columns of reduced vector q = blockIdx.y (its partials at
 * partial + q * chunks * C); thread (x, y) adds chunks y, y + ROWS, ... in order, then
 * thread (x, 0) adds the ROWS groups in order: dst[q][c] += sum_k partial[k * C + c]. ROWS = 8
 * for the row-chunk partials of the column sums, 32 for the one-pass LayerNorm backward's
 * blocks (more threads per column for the longer sums). */
template <int ROWS>
__global__ void __launch_bounds__(32 * ROWS)
    colsum_finish_kernel(colsum_dsts dsts, const float *partial, int C, int chunks) {
    __shared__ float sh[ROWS][33];
    float *dst = dsts.dst[blockIdx.y];
    if (dst == NULL) return; /* uniform over the block */
    int tx = threadIdx.x, ty = threadIdx.y;
    int c = blockIdx.x * 32 + tx;
    const float *p = partial + (size_t)blockIdx.y * chunks * C;
    float acc = 0.0f;
    if (c < C) {
#pragma unroll 8
        for (int k = ty; k < chunks; k += ROWS) acc += p[(size_t)k * C + c];
    }
    sh[ty][tx] = acc;
    __syncthreads();
    if (ty == 0 && c < C) {
        float total = 0.0f;
#pragma unroll
        for (int k = 0; k < ROWS; k++) total += sh[k][tx];
        dst[c] += total;
    }
}

static colsum_dsts make_dsts(float *a, float *b, float *c, float *d) {
    colsum_dsts x;
    x.dst[0] = a, x.dst[1] = b, x.dst[2] = c, x.dst[3] = d;
    return x;
}

static inline int aligned8(const void *p) { return ((uintptr_t)p & 7u) == 0; }

extern "C" cudaError_t gt_cu_layernorm_backward_weight(float *dw, float *db, const gt_bf16 *dout,
                                                       const gt_bf16 *inp, const float *mean,
                                                       const float *rstd, int N, int C,
                                                       float *scratch, cudaStream_t stream) {
    int chunks = GT_CU_COLSUM_CHUNKS, per = (N + chunks - 1) / chunks;
    float *p_db = scratch, *p_dw = scratch + (size_t)chunks * C;
    if (C % 4 == 0 && aligned8(dout) && aligned8(inp))
        colsum_partial_vec_kernel<true><<<dim3(ceil_div(C, 128), chunks), dim3(32, 8), 0, stream>>>(
            p_db, p_dw, (const bf16 *)dout, (const bf16 *)inp, mean, rstd, N, C, per);
    else
        colsum_partial_kernel<true><<<dim3(ceil_div(C, 32), chunks), dim3(32, 8), 0, stream>>>(
            p_db, p_dw, (const bf16 *)dout, (const bf16 *)inp, mean, rstd, N, C, per);
    cudaError_t err = cudaGetLastError();
    if (err != cudaSuccess) return err;
    /* y = 0: db from p_db (= scratch), y = 1: dw from p_dw (= scratch + chunks * C) */
    colsum_finish_kernel<8><<<dim3(ceil_div(C, 32), 2), dim3(32, 8), 0, stream>>>(
        make_dsts(db, dw, NULL, NULL), scratch, C, chunks);
    return cudaGetLastError();
}

/* ---- kernel variants and launch geometry ---- */

static int g_ln_bwd_blocks = GT_CU_LN_BWD_BLOCKS;
static int g_ln_bwd_impl = 2;

extern "C" void gt_cu_set_ln_bwd_blocks(int blocks) {
    g_ln_bwd_blocks = blocks < 1 ? 1 : blocks > GT_CU_LN_BWD_MAX_BLOCKS ? GT_CU_LN_BWD_MAX_BLOCKS
                                                                       : blocks;
}
extern "C" void gt_cu_set_ln_bwd_impl(int impl) {
    g_ln_bwd_impl = impl <= 1 ? 1 : impl >= 3 ? 3 : 2;
}

/* Launches the warp-per-row LayerNorm backward (impl 1) with the configured block count
 * (GANTRY_LN_BWD_BLOCKS). Its shared memory (NSUM * C floats per warp: 64 KB at C = 2048 with
 * the sums) may exceed the default 48 KB: opted in per kernel at first use (cudaFuncSetAttribute
 * is not a stream operation; allowed while a graph is captured). */
template <int K, bool SUMS>
static cudaError_t launch_ln_bwd_warp(bf16 *dinp, const bf16 *dresid, const bf16 *dout,
                                      const bf16 *inp, const float *mean, const float *rstd,
                                      const bf16 *w, float *scratch, int N, int C,
                                      int *blocks_out, cudaStream_t stream) {
    static int opted_in_bytes = 0; /* per instantiation */
    auto kernel = layernorm_backward_fused_kernel<K, SUMS>;
    size_t shmem = (size_t)LN_BWD_WARPS * (SUMS ? 4 : 2) * C * sizeof(float);
    if ((int)shmem > opted_in_bytes && shmem > 48 * 1024) {
        cudaError_t err = cudaFuncSetAttribute(
            kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)shmem);
        if (err != cudaSuccess) return err;
        opted_in_bytes = (int)shmem;
    }
    int blocks = g_ln_bwd_blocks;
    int max_blocks = (N + LN_BWD_WARPS - 1) / LN_BWD_WARPS; /* at least one row per warp */
    if (blocks > max_blocks) blocks = max_blocks;
    if (blocks > GT_CU_LN_BWD_MAX_BLOCKS) blocks = GT_CU_LN_BWD_MAX_BLOCKS;
    if (blocks < 1) blocks = 1;
    int per = (N + blocks - 1) / blocks;
    blocks = (N + per - 1) / per; /* no empty blocks */
    kernel<<<blocks, LN_BWD_WARPS * WARP, shmem, stream>>>(dinp, dresid, dout, inp, mean, rstd,
                                                           w, scratch, N, C, per);
    *blocks_out = blocks;
    return cudaGetLastError();
}

/* Blocks of one wave of the block-cooperative LayerNorm backward at `threads` per block: as
 * many per SM as fit (at most `cap` in all, whole SMs), times the device's SMs
 * (gt_cu_kernels_init; the caller caches the answer). */
template <typename KERNEL>
static cudaError_t ln_block_wave(KERNEL kernel, int threads, int cap, int *blocks) {
    int per_sm = 0, sms = g_sms > 0 ? g_sms : 1;
    cudaError_t err = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, threads, 0);
    if (err != cudaSuccess) return err;
    if (per_sm > cap / sms) per_sm = cap / sms;
    *blocks = (per_sm < 1 ? 1 : per_sm) * sms;
    return cudaSuccess;
}

/* threads of a block-cooperative LayerNorm block: one per 16-byte vector, whole warps */
static inline int ln_block_threads(int C) { return (C / LN_VEC + WARP - 1) / WARP * WARP; }

/* The block-cooperative backward (impl 2: R = 4 rows per group without the bias sums, 2 with
 * them, the fastest of 2 / 4 / 8 on H200): one wave of blocks (at most
 * GT_CU_LN_BWD_MAX_BLOCKS, the scratch's bound), rows split evenly in multiples of R. */
template <int R, bool SUMS, bool PREFETCH>
static cudaError_t launch_ln_bwd_block(bf16 *dinp, const bf16 *dresid, const bf16 *dout,
                                       const bf16 *inp, const float *mean, const float *rstd,
                                       const bf16 *w, float *scratch, int N, int C,
                                       int *blocks_out, cudaStream_t stream) {
    auto kernel = layernorm_backward_block_kernel<R, SUMS, PREFETCH>;
    static int wave_threads = 0, wave_blocks = 0; /* per instantiation */
    const int threads = ln_block_threads(C);
    if (wave_threads != threads) {
        cudaError_t err = ln_block_wave(kernel, threads, GT_CU_LN_BWD_MAX_BLOCKS, &wave_blocks);
        if (err != cudaSuccess) return err;
        wave_threads = threads;
    }
    int blocks = wave_blocks, groups = (N + R - 1) / R;
    if (blocks > groups) blocks = groups;
    if (blocks < 1) blocks = 1;
    int per = (groups + blocks - 1) / blocks * R; /* rows per block */
    blocks = (N + per - 1) / per;                 /* no empty blocks */
    kernel<<<blocks, threads, 0, stream>>>(dinp, dresid, dout, inp, mean, rstd, w, scratch, N, C,
                                           per);
    *blocks_out = blocks;
    return cudaGetLastError();
}

/* the configured impl (K: vectors per lane of impl 1, 1..8) */
template <bool SUMS>
static cudaError_t launch_ln_bwd_k(int K, bf16 *dinp, const bf16 *dresid, const bf16 *dout,
                                   const bf16 *inp, const float *mean, const float *rstd,
                                   const bf16 *w, float *scratch, int N, int C, int *blocks,
                                   cudaStream_t stream) {
    if (g_ln_bwd_impl == 2)
        return launch_ln_bwd_block<SUMS ? 2 : 4, SUMS, false>(dinp, dresid, dout, inp, mean,
                                                              rstd, w, scratch, N, C, blocks,
                                                              stream);
    if (g_ln_bwd_impl == 3) /* 2 rows a step: with 4 the prefetch spills (ptxas -v) */
        return launch_ln_bwd_block<2, SUMS, true>(dinp, dresid, dout, inp, mean, rstd, w,
                                                   scratch, N, C, blocks, stream);
#define LN_K_CASE(KK)                                                                              \
    case KK:                                                                                       \
        return launch_ln_bwd_warp<KK, SUMS>(dinp, dresid, dout, inp, mean, rstd, w, scratch, N, C, \
                                            blocks, stream);
    switch (K) {
        LN_K_CASE(1)
        LN_K_CASE(2)
        LN_K_CASE(3)
        LN_K_CASE(4)
        LN_K_CASE(5)
        LN_K_CASE(6)
        LN_K_CASE(7)
    default:
        LN_K_CASE(8)
    }
#undef LN_K_CASE
}

extern "C" cudaError_t gt_cu_layernorm_backward(gt_bf16 *dinp, const gt_bf16 *dresid,
                                                const gt_bf16 *dout, const gt_bf16 *inp,
                                                const float *mean, const float *rstd,
                                                const gt_bf16 *w, float *dw, float *db,
                                                float *sum_resid, float *sum_inp, int N, int C,
                                                float *scratch, cudaStream_t stream) {
    if (sum_resid != NULL && dresid == NULL) return cudaErrorInvalidValue;
    int K = ln_vec_per_lane(C);
    cudaError_t err = cudaSuccess;
    if (K == 0 || !aligned16(dinp) || (dresid != NULL && !aligned16(dresid)) || !aligned16(dout) ||
        !aligned16(inp) || !aligned16(w)) {
        /* the residual's sum before dinp (which may alias it) is written */
        if (sum_resid != NULL) err = gt_cu_bias_backward(sum_resid, dresid, N, C, scratch, stream);
        if (err == cudaSuccess)
            err = gt_cu_layernorm_backward_input(dinp, dresid, dout, inp, mean, rstd, w, N, C,
                                                 stream);
        if (err == cudaSuccess)
            err = gt_cu_layernorm_backward_weight(dw, db, dout, inp, mean, rstd, N, C, scratch,
                                                  stream);
        if (err == cudaSuccess && sum_inp != NULL)
            err = gt_cu_bias_backward(sum_inp, dinp, N, C, scratch, stream);
        return err;
    }
    int sums = sum_resid != NULL || sum_inp != NULL, blocks = 0;
    if (sums)
        err = launch_ln_bwd_k<true>(K, (bf16 *)dinp, (const bf16 *)dresid, (const bf16 *)dout,
                                    (const bf16 *)inp, mean, rstd, (const bf16 *)w, scratch, N, C,
                                    &blocks, stream);
    else
        err = launch_ln_bwd_k<false>(K, (bf16 *)dinp, (const bf16 *)dresid, (const bf16 *)dout,
                                     (const bf16 *)inp, mean, rstd, (const bf16 *)w, scratch, N,
                                     C, &blocks, stream);
    if (err != cudaSuccess) return err;
    /* y = q: reduced vector q of the partials (0: db, 1: dw, 2: residual sum, 3: dinp sum) */
    colsum_finish_kernel<32><<<dim3(ceil_div(C, 32), sums ? 4 : 2), dim3(32, 32), 0, stream>>>(
        make_dsts(db, dw, sum_resid, sum_inp), scratch, C, blocks);
    return cudaGetLastError();
}

extern "C" cudaError_t gt_cu_bias_backward(float *dbias, const gt_bf16 *dout, int N, int OC,
                                           float *scratch, cudaStream_t stream) {
    int chunks = GT_CU_COLSUM_CHUNKS, per = (N + chunks - 1) / chunks;
    if (OC % 4 == 0 && aligned8(dout))
        colsum_partial_vec_kernel<false>
            <<<dim3(ceil_div(OC, 128), chunks), dim3(32, 8), 0, stream>>>(
                scratch, NULL, (const bf16 *)dout, NULL, NULL, NULL, N, OC, per);
    else
        colsum_partial_kernel<false><<<dim3(ceil_div(OC, 32), chunks), dim3(32, 8), 0, stream>>>(
            scratch, NULL, (const bf16 *)dout, NULL, NULL, NULL, N, OC, per);
    cudaError_t err = cudaGetLastError();
    if (err != cudaSuccess) return err;
    colsum_finish_kernel<8><<<dim3(ceil_div(OC, 32), 1), dim3(32, 8), 0, stream>>>(
        make_dsts(dbias, NULL, NULL, NULL), scratch, OC, chunks);
    return cudaGetLastError();
}

/* ------------------------------------------------------------------------------------------ */
/* GELU (tanh), residual                                                                       */

#define GELU_SCALE 0.7978845608028654f /* sqrt(2/pi) */

__global__ void gelu_forward_kernel(bf16 *out, const bf16 *inp, size_t n) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        float x = __bfloat162float(inp[i]);
        float cube = 0.044715f * x * x * x;
        out[i] = __float2bfloat16(0.5f * x * (1.0f + tanhf(GELU_SCALE * (x + cube))));
    }
}

__global__ void gelu_backward_kernel(bf16 *d, const bf16 *pre, size_t n) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        float x = __bfloat162float(pre[i]);
        float cube = 0.044715f * x * x * x;
        float arg = GELU_SCALE * (x + cube);
        float th = tanhf(arg);
        float sech2 = 1.0f - th * th;
        float grad = 0.5f * (1.0f + th) +
                     x * 0.5f * sech2 * GELU_SCALE * (1.0f + 3.0f * 0.044715f * x * x);
        d[i] = __float2bfloat16(grad * __bfloat162float(d[i]));
    }
}

__global__ void residual_kernel(bf16 *out, const bf16 *a, const bf16 *b, size_t n) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        out[i] = __float2bfloat16(__bfloat162float(a[i]) + __bfloat162float(b[i]));
}

extern "C" cudaError_t gt_cu_gelu_forward(gt_bf16 *out, const gt_bf16 *inp, size_t n,
                                          cudaStream_t stream) {
    gelu_forward_kernel<<<grid_for(n), 256, 0, stream>>>((bf16 *)out, (const bf16 *)inp, n);
    return cudaGetLastError();
}
extern "C" cudaError_t gt_cu_gelu_backward_inplace(gt_bf16 *d, const gt_bf16 *pre, size_t n,
                                                   cudaStream_t stream) {
    gelu_backward_kernel<<<grid_for(n), 256, 0, stream>>>((bf16 *)d, (const bf16 *)pre, n);
    return cudaGetLastError();
}
/* x[i] = scale * u, u in [-1, 1) from a hash of (seed, i): operands for timing runs, which on
 * zeros can run faster than on real data (less switching under the power cap) */
__global__ void fill_uniform_kernel(bf16 *x, size_t n, uint32_t seed, float scale) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        uint32_t h = ((uint32_t)i ^ (uint32_t)(i >> 32) * 0x27D4EB2Fu) * 0x9E3779B1u ^ seed;
        h ^= h >> 16, h *= 0x85EBCA6Bu, h ^= h >> 13, h *= 0xC2B2AE35u, h ^= h >> 16;
        x[i] = __float2bfloat16(scale * ((float)(h >> 8) * (1.0f / 8388608.0f) - 1.0f));
    }
}

extern "C" cudaError_t gt_cu_fill_uniform(gt_bf16 *x, size_t n, uint32_t seed, float scale,
                                          cudaStream_t stream) {
    fill_uniform_kernel<<<grid_for(n), 256, 0, stream>>>((bf16 *)x, n, seed, scale);
    return cudaGetLastError();
}

extern "C" cudaError_t gt_cu_residual_forward(gt_bf16 *out, const gt_bf16 *a, const gt_bf16 *b,
                                              size_t n, cudaStream_t stream) {
    residual_kernel<<<grid_for(n), 256, 0, stream>>>((bf16 *)out, (const bf16 *)a,
                                                     (const bf16 *)b, n);
    return cudaGetLastError();
}

/* ------------------------------------------------------------------------------------------ */
/* reference attention: permutes and causal softmax                                            */

/* i over (b, h, t, d) of the (B,NH,T,hs) layout; src index in (B,T,3,NH,hs) */
__global__ void attn_permute_kernel(bf16 *q, bf16 *k, bf16 *v, const bf16 *qkv, int B, int T,
                                    int NH, int hs, int backward) {
    size_t total = (size_t)B * NH * T * hs;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < total;
         i += (size_t)gridDim.x * blockDim.x) {
        int d = (int)(i % hs);
        size_t r = i / hs;
        int t = (int)(r % T);
        r /= T;
        int h = (int)(r % NH);
        int b = (int)(r / NH);
        size_t C = (size_t)NH * hs;
        size_t src = ((size_t)b * T + t) * 3 * C + (size_t)h * hs + d;
        if (!backward) {
            q[i] = qkv[src];
            k[i] = qkv[src + C];
            v[i] = qkv[src + 2 * C];
        } else { /* qkv is the output here */
            bf16 *dqkv = (bf16 *)qkv;
            dqkv[src] = q[i];
            dqkv[src + C] = k[i];
            dqkv[src + 2 * C] = v[i];
        }
    }
}

__global__ void attn_unpermute_kernel(bf16 *out, bf16 *y, int B, int T, int NH, int hs,
                                      int backward) {
    size_t total = (size_t)B * NH * T * hs;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < total;
         i += (size_t)gridDim.x * blockDim.x) {
        int d = (int)(i % hs);
        size_t r = i / hs;
        int t = (int)(r % T);
        r /= T;
        int h = (int)(r % NH);
        int b = (int)(r / NH);
        size_t dst = (((size_t)b * T + t) * NH + h) * hs + d;
        if (!backward) out[dst] = y[i];
        else y[i] = out[dst];
    }
}

extern "C" cudaError_t gt_cu_attn_permute(gt_bf16 *q, gt_bf16 *k, gt_bf16 *v, const gt_bf16 *qkv,
                                          int B, int T, int NH, int hs, cudaStream_t stream) {
    attn_permute_kernel<<<grid_for((size_t)B * NH * T * hs), 256, 0, stream>>>(
        (bf16 *)q, (bf16 *)k, (bf16 *)v, (const bf16 *)qkv, B, T, NH, hs, 0);
    return cudaGetLastError();
}
extern "C" cudaError_t gt_cu_attn_permute_backward(gt_bf16 *dqkv, const gt_bf16 *dq,
                                                   const gt_bf16 *dk, const gt_bf16 *dv, int B,
                                                   int T, int NH, int hs, cudaStream_t stream) {
    attn_permute_kernel<<<grid_for((size_t)B * NH * T * hs), 256, 0, stream>>>(
        (bf16 *)dq, (bf16 *)dk, (bf16 *)dv, (const bf16 *)dqkv, B, T, NH, hs, 1);
    return cudaGetLastError();
}
extern "C" cudaError_t gt_cu_attn_unpermute(gt_bf16 *out, const gt_bf16 *y, int B, int T, int NH,
                                            int hs, cudaStream_t stream) {
    attn_unpermute_kernel<<<grid_for((size_t)B * NH * T * hs), 256, 0, stream>>>(
        (bf16 *)out, (bf16 *)y, B, T, NH, hs, 0);
    return cudaGetLastError();
}
extern "C" cudaError_t gt_cu_attn_unpermute_backward(gt_bf16 *dy, const gt_bf16 *dout, int B,
                                                     int T, int NH, int hs,
                                                     cudaStream_t stream) {
    attn_unpermute_kernel<<<grid_for((size_t)B * NH * T * hs), 256, 0, stream>>>(
        (bf16 *)dout, (bf16 *)dy, B, T, NH, hs, 1);
    return cudaGetLastError();
}

/* one warp per row (bh, t) */
__global__ void causal_softmax_forward_kernel(bf16 *att, const bf16 *preatt, float scale, int BH,
                                              int T) {
    size_t row = blockIdx.x * (size_t)(blockDim.x / WARP) + threadIdx.x / WARP;
    int lane = threadIdx.x % WARP;
    if (row >= (size_t)BH * T) return;
    int t = (int)(row % T);
    const bf16 *x = preatt + row * T;
    bf16 *y = att + row * T;
    float mx = -FLT_MAX;
    for (int j = lane; j <= t; j += WARP) mx = fmaxf(mx, scale * __bfloat162float(x[j]));
    mx = warp_max(mx);
    float sum = 0.0f;
    for (int j = lane; j <= t; j += WARP) sum += expf(scale * __bfloat162float(x[j]) - mx);
    float inv = 1.0f / warp_sum(sum);
    for (int j = lane; j < T; j += WARP)
        y[j] = __float2bfloat16(j <= t ? expf(scale * __bfloat162float(x[j]) - mx) * inv : 0.0f);
}

__global__ void causal_softmax_backward_kernel(bf16 *dpreatt, const bf16 *datt, const bf16 *att,
                                               float scale, int BH, int T) {
    size_t row = blockIdx.x * (size_t)(blockDim.x / WARP) + threadIdx.x / WARP;
    int lane = threadIdx.x % WARP;
    if (row >= (size_t)BH * T) return;
    int t = (int)(row % T);
    const bf16 *a = att + row * T, *da = datt + row * T;
    float dot = 0.0f;
    for (int j = lane; j <= t; j += WARP) dot += __bfloat162float(a[j]) * __bfloat162float(da[j]);
    dot = warp_sum(dot);
    bf16 *out = dpreatt + row * T;
    for (int j = lane; j < T; j += WARP) {
        float v = j <= t ? scale * __bfloat162float(a[j]) * (__bfloat162float(da[j]) - dot) : 0.0f;
        out[j] = __float2bfloat16(v);
    }
}

extern "C" cudaError_t gt_cu_causal_softmax_forward(gt_bf16 *att, const gt_bf16 *preatt,
                                                    float scale, int BH, int T,
                                                    cudaStream_t stream) {
    causal_softmax_forward_kernel<<<ceil_div((size_t)BH * T, 8), 256, 0, stream>>>(
        (bf16 *)att, (const bf16 *)preatt, scale, BH, T);
    return cudaGetLastError();
}
extern "C" cudaError_t gt_cu_causal_softmax_backward(gt_bf16 *dpreatt, const gt_bf16 *datt,
                                                     const gt_bf16 *att, float scale, int BH,
                                                     int T, cudaStream_t stream) {
    causal_softmax_backward_kernel<<<ceil_div((size_t)BH * T, 8), 256, 0, stream>>>(
        (bf16 *)dpreatt, (const bf16 *)datt, (const bf16 *)att, scale, BH, T);
    return cudaGetLastError();
}

/* ------------------------------------------------------------------------------------------ */
/* sum of squares (double), AdamW                                                              */

/* Block b sums the squares of a fixed slice of x (a multiple of 4 elements wide), 16-byte loads
 * when x is 16-byte aligned, so the partition and the order of the sums do not depend on
 * timing: the same bits every run. */
__global__ void sq_partial_kernel(double *partial, const float *x, size_t n) {
    __shared__ double shared[256];
    size_t per = ((n + gridDim.x - 1) / gridDim.x + 3) & ~(size_t)3;
    size_t b0 = min(n, (size_t)blockIdx.x * per), b1 = min(n, b0 + per);
    double acc = 0.0;
    size_t tail = b0;
    if (((uintptr_t)x & 15) == 0) {
        const float4 *v = (const float4 *)(x + b0);
        size_t nv = (b1 - b0) / 4;
#pragma unroll 4
        for (size_t i = threadIdx.x; i < nv; i += blockDim.x) {
            float4 q = v[i];
            acc += (double)q.x * q.x + (double)q.y * q.y + (double)q.z * q.z + (double)q.w * q.w;
        }
        tail = b0 + 4 * nv;
    }
    for (size_t i = tail + threadIdx.x; i < b1; i += blockDim.x) acc += (double)x[i] * x[i];
    shared[threadIdx.x] = acc;
    __syncthreads();
    for (int s = blockDim.x / 2; s > 0; s >>= 1) {
        if ((int)threadIdx.x < s) shared[threadIdx.x] += shared[threadIdx.x + s];
        __syncthreads();
    }
    if (threadIdx.x == 0) partial[blockIdx.x] = shared[0];
}

__global__ void sq_finish_kernel(double *out, const double *partial, int n) {
    if (threadIdx.x != 0 || blockIdx.x != 0) return;
    double acc = 0.0;
    for (int i = 0; i < n; i++) acc += partial[i];
    out[0] = acc;
}

extern "C" cudaError_t gt_cu_sq_sum(double *out, double *partial, const float *x, size_t n,
                                    cudaStream_t stream) {
    sq_partial_kernel<<<GT_CU_SQ_BLOCKS, 256, 0, stream>>>(partial, x, n);
    sq_finish_kernel<<<1, 32, 0, stream>>>(out, partial, GT_CU_SQ_BLOCKS);
    return cudaGetLastError();
}

/* Block b zeroes chunk b: (offset, count) = chunks[2b], chunks[2b + 1]. */
__global__ void zero_chunks_kernel(float *base, const uint64_t *chunks) {
    float *p = base + chunks[2 * blockIdx.x];
    uint64_t n = chunks[2 * blockIdx.x + 1];
    for (uint64_t i = threadIdx.x; i < n; i += blockDim.x) p[i] = 0.0f;
}

extern "C" cudaError_t gt_cu_zero_chunks(float *base, const uint64_t *chunks, int n,
                                         cudaStream_t stream) {
    if (n <= 0) return cudaSuccess;
    zero_chunks_kernel<<<n, 256, 0, stream>>>(base, chunks);
    return cudaGetLastError();
}

#define ADAMW_PER_BLOCK 4096

/* Block b of a launch updates the elements of buffer block kb = begin / 4096 + b that lie in
 * [begin, end): the blocks sit on the buffer's fixed 4096-element grid whatever the range, so
 * with sq_partial each grid block's squared raw gradients are added to sq_partial[kb] in a fixed
 * order (per thread, then a fixed tree); a grid block cut by two ranges gets their two sums in
 * range order (launches on one stream do not overlap). */
__global__ void adamw_kernel(float *params, bf16 *params16, const float *grads, float *m,
                             float *v, size_t begin, size_t end, const uint64_t *seg_end,
                             const uint8_t *seg_decay, int n_segments, gt_cu_adamw_args a,
                             double *sq_partial) {
    __shared__ double shared[256];
    size_t kb = begin / ADAMW_PER_BLOCK + blockIdx.x;
    size_t b0 = max(begin, kb * ADAMW_PER_BLOCK);
    size_t b1 = min(end, (kb + 1) * ADAMW_PER_BLOCK);
    /* first segment whose end is beyond b0 (binary search, same for the whole block) */
    int lo = 0, hi = n_segments - 1;
    while (lo < hi) {
        int mid = (lo + hi) / 2;
        if (seg_end[mid] > b0) hi = mid;
        else lo = mid + 1;
    }
    int seg = lo;
    double sq = 0.0;
    for (size_t i = b0 + threadIdx.x; i < b1; i += blockDim.x) {
        while (seg < n_segments - 1 && i >= seg_end[seg]) seg++;
        float decay = seg_decay[seg] ? 1.0f - a.lr * a.weight_decay : 1.0f;
        float raw = grads[i];
        float g = raw * a.grad_scale;
        float p = params[i] * decay;
        float mi = m[i] + a.one_minus_beta1 * (g - m[i]);
        float vi = v[i] * a.beta2 + a.one_minus_beta2 * g * g;
        float denom = sqrtf(vi) / a.bc2_sqrt + a.eps;
        p = p - a.step_size * (mi / denom);
        params[i] = p;
        params16[i] = __float2bfloat16(p);
        m[i] = mi;
        v[i] = vi;
        sq += (double)raw * raw;
    }
    if (sq_partial == NULL) return; /* the same for every thread of the launch */
    shared[threadIdx.x] = sq;
    __syncthreads();
    for (int s = blockDim.x / 2; s > 0; s >>= 1) {
        if ((int)threadIdx.x < s) shared[threadIdx.x] += shared[threadIdx.x + s];
        __syncthreads();
    }
    if (threadIdx.x == 0) sq_partial[kb] += shared[0];
}

extern "C" cudaError_t gt_cu_adamw(float *params, gt_bf16 *params16, const float *grads,
                                   float *m, float *v, size_t begin, size_t n,
                                   const uint64_t *seg_end, const uint8_t *seg_decay,
                                   int n_segments, gt_cu_adamw_args args, double *sq_partial,
                                   cudaStream_t stream) {
    if (n == 0) return cudaSuccess;
    size_t blocks = (begin + n - 1) / ADAMW_PER_BLOCK - begin / ADAMW_PER_BLOCK + 1;
    adamw_kernel<<<(unsigned)blocks, 256, 0, stream>>>(
        params, (bf16 *)params16, grads, m, v, begin, begin + n, seg_end, seg_decay, n_segments,
        args, sq_partial);
    return cudaGetLastError();
}

/* out[0] = the sum of x[0, n): thread t sums x[t], x[t + 1024], ... in order, then a fixed
 * tree (one block: the same bits every run). */
__global__ void sum_doubles_kernel(double *out, const double *x, size_t n) {
    __shared__ double shared[1024];
    double acc = 0.0;
    for (size_t i = threadIdx.x; i < n; i += blockDim.x) acc += x[i];
    shared[threadIdx.x] = acc;
    __syncthreads();
    for (int s = blockDim.x / 2; s > 0; s >>= 1) {
        if ((int)threadIdx.x < s) shared[threadIdx.x] += shared[threadIdx.x + s];
        __syncthreads();
    }
    if (threadIdx.x == 0) out[0] = shared[0];
}

extern "C" size_t gt_cu_adamw_grid_blocks(size_t num_params) {
    return (num_params + ADAMW_PER_BLOCK - 1) / ADAMW_PER_BLOCK;
}

extern "C" cudaError_t gt_cu_sum_doubles(double *out, const double *x, size_t n,
                                         cudaStream_t stream) {
    sum_doubles_kernel<<<1, 1024, 0, stream>>>(out, x, n);
    return cudaGetLastError();
}
