/*
 * layernorm_backward.cu — LayerNorm backward and the column sums it shares with the bias
 * gradients (kernels.h). The one-pass backward gives a block to a group of rows, a thread to
 * each 16-byte column vector, and keeps the weight, bias and residual column sums in registers;
 * rows that do not fit it (C % 8 != 0, C > 2048, misaligned pointers) take separate input and
 * column-sum passes. Column sums are two-phase with a fixed partition and order: every
 * reduction is deterministic. Other LayerNorm backward kernels, for side-by-side timing, are
 * dev tools (native/dev/cuda/layernorm_backward_variants.cu).
 */
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "layernorm_common.cuh"

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

/* One row of the LayerNorm backward by one warp: lane handles the 16-byte vectors
 * v = lane + 32 k (k < K, v < C / 8); dout, inp and dresid (if any) are loaded into registers
 * before any store and kept across both passes, w re-read (L1-resident); each vector is read and
 * written by one lane only, so dinp may alias dresid. dinp = dresid + d LN / d inp. */
template <int K>
__device__ __forceinline__ void layernorm_backward_row(bf16 *dinp, const bf16 *dresid,
                                                       const bf16 *dout, const bf16 *inp,
                                                       float m, float s, const uint4 *wv,
                                                       int row, int lane, int C) {
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
#pragma unroll
            for (int j = 0; j < LN_VEC; j++) {
                float dn = fw[j] * fd[j];
                float xhat = (fx[j] - m) * s;
                float dx = s * (dn - dsum - xhat * dxsum);
                fr[j] = fr[j] + dx;
            }
            uint4 packed = bf16x8_pack(fr);
            og[v] = packed;
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
    layernorm_backward_row<K>(dinp, dresid, dout, inp, mean[row], rstd[row],
                              reinterpret_cast<const uint4 *>(w), row, lane, C);
}

/* ---- block-cooperative LayerNorm rows ----
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
template <int R, bool SUMS>
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
    /* the group's dout, inp, mean and rstd */
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
    for (int row0 = r_begin; row0 < r_end; row0 += R, half ^= 1) {
        uint4 rv[R];
        load_group(row0, dv, xv, m, s);
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

/* The block-cooperative backward (R = 4 rows per group without the bias sums, 2 with them, the
 * fastest of 2 / 4 / 8 on H200): one wave of blocks (at most GT_CU_LN_BWD_MAX_BLOCKS, the
 * scratch's bound), rows split evenly in multiples of R. */
template <int R, bool SUMS>
static cudaError_t launch_ln_bwd_block(bf16 *dinp, const bf16 *dresid, const bf16 *dout,
                                       const bf16 *inp, const float *mean, const float *rstd,
                                       const bf16 *w, float *scratch, int N, int C,
                                       int *blocks_out, cudaStream_t stream) {
    auto kernel = layernorm_backward_block_kernel<R, SUMS>;
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
        err = launch_ln_bwd_block<2, true>((bf16 *)dinp, (const bf16 *)dresid,
                                           (const bf16 *)dout, (const bf16 *)inp, mean, rstd,
                                           (const bf16 *)w, scratch, N, C, &blocks, stream);
    else
        err = launch_ln_bwd_block<4, false>((bf16 *)dinp, (const bf16 *)dresid,
                                            (const bf16 *)dout, (const bf16 *)inp, mean, rstd,
                                            (const bf16 *)w, scratch, N, C, &blocks, stream);
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
