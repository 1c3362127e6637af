/*
 * layernorm_backward_variants.cu — LayerNorm backward kernels kept beside the library's one for
 * side-by-side timing and agreement checks (gantry-kernel-bench; not in libgantry_native):
 *   impl 1: one warp per row, 2 warps per block, `blocks` blocks, the column sums in shared
 *           memory (layernorm_backward_fused_kernel);
 *   impl 2: the library's block-cooperative rows (gt_cu_layernorm_backward itself);
 *   impl 3: impl 2 with 2 rows a step and the next step's dout / inp / mean / rstd loaded
 *           before the block reduction, so the loads are in flight across the barrier.
 * Each computes what gt_cu_layernorm_backward computes (kernels.h), with the column sums in
 * another fixed order; rows that do not fit registers take the library's path for every impl.
 * Compiled together with the library's kernel sources (the library hides its symbols).
 */
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "layernorm_backward_variants.h"
#include "layernorm_common.cuh"

namespace lnbwd_dev {

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

/* ---- block-cooperative LayerNorm rows (impl 2 in the library, impl 3 here) ----
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

/* Launches the warp-per-row LayerNorm backward (impl 1) with `blocks` blocks (at most
 * GT_CU_LN_BWD_MAX_BLOCKS, the scratch's bound). Its shared memory (NSUM * C floats per warp: 64 KB at C = 2048 with
 * the sums) may exceed the default 48 KB: opted in per kernel at first use (cudaFuncSetAttribute
 * is not a stream operation; allowed while a graph is captured). */
template <int K, bool SUMS>
static cudaError_t launch_ln_bwd_warp(bf16 *dinp, const bf16 *dresid, const bf16 *dout,
                                      const bf16 *inp, const float *mean, const float *rstd,
                                      const bf16 *w, float *scratch, int N, int C, int blocks,
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

/* The block-cooperative backward (impl 3: R = 2 with PREFETCH): one wave of blocks (at most
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

/* impl 1 or 3 (K: vectors per lane of impl 1, 1..8; blocks: impl 1's block count) */
template <bool SUMS>
static cudaError_t launch_ln_bwd_k(int impl, int K, int nblocks, bf16 *dinp, const bf16 *dresid, const bf16 *dout,
                                   const bf16 *inp, const float *mean, const float *rstd,
                                   const bf16 *w, float *scratch, int N, int C, int *blocks,
                                   cudaStream_t stream) {
    if (impl == 3) /* 2 rows a step: with 4 the prefetch spills (ptxas -v) */
        return launch_ln_bwd_block<2, SUMS, true>(dinp, dresid, dout, inp, mean, rstd, w,
                                                   scratch, N, C, blocks, stream);
#define LN_K_CASE(KK)                                                                              \
    case KK:                                                                                       \
        return launch_ln_bwd_warp<KK, SUMS>(dinp, dresid, dout, inp, mean, rstd, w, scratch, N, C, \
                                            nblocks, blocks, stream);
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

} /* namespace lnbwd_dev */

extern "C" cudaError_t gt_dev_layernorm_backward(int impl, int blocks, gt_bf16 *dinp,
                                                 const gt_bf16 *dresid, const gt_bf16 *dout,
                                                 const gt_bf16 *inp, const float *mean,
                                                 const float *rstd, const gt_bf16 *w, float *dw,
                                                 float *db, float *sum_resid, float *sum_inp,
                                                 int N, int C, float *scratch,
                                                 cudaStream_t stream) {
    using namespace lnbwd_dev;
    int K = ln_vec_per_lane(C);
    /* impl 2, and every impl where the rows do not fit registers: the library's own path */
    if (impl == 2 || K == 0 || !aligned16(dinp) || (dresid != NULL && !aligned16(dresid)) ||
        !aligned16(dout) || !aligned16(inp) || !aligned16(w))
        return gt_cu_layernorm_backward(dinp, dresid, dout, inp, mean, rstd, w, dw, db,
                                        sum_resid, sum_inp, N, C, scratch, stream);
    if (impl != 1 && impl != 3) return cudaErrorInvalidValue;
    if (sum_resid != NULL && dresid == NULL) return cudaErrorInvalidValue;
    if (blocks < 1) blocks = 1;
    if (blocks > GT_CU_LN_BWD_MAX_BLOCKS) blocks = GT_CU_LN_BWD_MAX_BLOCKS;
    int sums = sum_resid != NULL || sum_inp != NULL, used = 0;
    cudaError_t err;
    if (sums)
        err = launch_ln_bwd_k<true>(impl, K, blocks, (bf16 *)dinp, (const bf16 *)dresid,
                                    (const bf16 *)dout, (const bf16 *)inp, mean, rstd,
                                    (const bf16 *)w, scratch, N, C, &used, stream);
    else
        err = launch_ln_bwd_k<false>(impl, K, blocks, (bf16 *)dinp, (const bf16 *)dresid,
                                     (const bf16 *)dout, (const bf16 *)inp, mean, rstd,
                                     (const bf16 *)w, scratch, N, C, &used, stream);
    if (err != cudaSuccess) return err;
    /* y = q: reduced vector q of the partials (0: db, 1: dw, 2: residual sum, 3: dinp sum) */
    colsum_finish_kernel<32><<<dim3(ceil_div(C, 32), sums ? 4 : 2), dim3(32, 32), 0, stream>>>(
        make_dsts(db, dw, sum_resid, sum_inp), scratch, C, used);
    return cudaGetLastError();
}
