/*
 * crossentropy.cu — the loss kernels of the last stage (see kernels.h for the contracts of
 * gt_cu_crossentropy_forward / _backward and gt_cu_mean).
 *
 * One block per row of V logits, rows ld apart (ld % 8 == 0, ld >= V: the stage pads the rows of
 * its logits buffer, so any vocabulary works), 16-byte loads of 8 bf16. The padded columns
 * [V, ld) are outside the softmax: they count as -inf in the forward and the backward writes 0
 * into them, so they never win a row and carry no gradient. The forward is one pass with an
 * online softmax: each thread keeps a running (max, sum of exp(x - max)) and the block merges
 * the pairs; the backward rewrites the row in place as dloss * (softmax - onehot). fp32 math;
 * every reduction has a fixed order (deterministic).
 */
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <float.h>
#include <math.h>
#include <stdint.h>

#include "kernels.h"

typedef __nv_bfloat16 bf16;

#define CE_THREADS 512
#define CE_WARPS (CE_THREADS / 32)

/* A softmax partial: max m and s = sum exp(x - m) over the values seen. */
struct MaxSum {
    float m, s;
};

__device__ __forceinline__ MaxSum merge(MaxSum a, MaxSum b) {
    float m = fmaxf(a.m, b.m);
    if (m == -FLT_MAX) return a; /* both empty */
    return {m, a.s * expf(a.m - m) + b.s * expf(b.m - m)};
}

/* Merge over the block; result in every thread. */
__device__ MaxSum block_merge(MaxSum v) {
    __shared__ float sm[CE_WARPS], ss[CE_WARPS];
    int lane = threadIdx.x % 32, wid = threadIdx.x / 32;
    for (int o = 16; o > 0; o >>= 1) {
        MaxSum other = {__shfl_xor_sync(0xffffffffu, v.m, o), __shfl_xor_sync(0xffffffffu, v.s, o)};
        v = merge(v, other);
    }
    if (lane == 0) sm[wid] = v.m, ss[wid] = v.s;
    __syncthreads();
    v = lane < CE_WARPS ? MaxSum{sm[lane], ss[lane]} : MaxSum{-FLT_MAX, 0.0f};
    for (int o = 16; o > 0; o >>= 1) {
        MaxSum other = {__shfl_xor_sync(0xffffffffu, v.m, o), __shfl_xor_sync(0xffffffffu, v.s, o)};
        v = merge(v, other);
    }
    return v;
}

/* Vectors of 8 holding the row's V logits (the last one may end in padded columns). */
__device__ __forceinline__ int row_vectors(int V) { return (V + 7) / 8; }

/* The row's softmax partial over the block: thread t reads vectors t, t + CE_THREADS, ... of
 * the row (ceil(V / 8) of them; columns >= V count as -inf, so each vector has a finite max);
 * result in every thread, after a block barrier (every read done). */
__device__ MaxSum row_max_sum(const uint4 *x, int V) {
    MaxSum acc = {-FLT_MAX, 0.0f};
    for (int j = threadIdx.x; j < row_vectors(V); j += CE_THREADS) {
        uint4 raw = x[j];
        const bf16 *v = reinterpret_cast<const bf16 *>(&raw);
        float f[8], vmax = -FLT_MAX;
#pragma unroll
        for (int i = 0; i < 8; i++) {
            f[i] = 8 * j + i < V ? __bfloat162float(v[i]) : -INFINITY;
            vmax = fmaxf(vmax, f[i]);
        }
        float m = fmaxf(acc.m, vmax), s = 0.0f;
#pragma unroll
        for (int i = 0; i < 8; i++) s += expf(f[i] - m);
        acc.s = (acc.m == -FLT_MAX ? 0.0f : acc.s * expf(acc.m - m)) + s;
        acc.m = m;
    }
    return block_merge(acc);
}

/* In place, the block's row: x = scale * (exp(x - lse) - [j == target]); padded columns 0 */
__device__ void row_softmax_grad(uint4 *x, int V, float lse, int tgt, float scale) {
    for (int j = threadIdx.x; j < row_vectors(V); j += CE_THREADS) {
        uint4 raw = x[j];
        bf16 *v = reinterpret_cast<bf16 *>(&raw);
#pragma unroll
        for (int i = 0; i < 8; i++) {
            int col = 8 * j + i;
            float p = col < V ? expf(__bfloat162float(v[i]) - lse) : 0.0f;
            v[i] = __float2bfloat16((p - (col == tgt ? 1.0f : 0.0f)) * scale);
        }
        x[j] = raw;
    }
}

/* block (CE_THREADS) per row */
__global__ void __launch_bounds__(CE_THREADS)
    crossentropy_forward_vec_kernel(float *lse, float *losses, const bf16 *logits,
                                    const int32_t *targets, int V, int ld) {
    size_t row = blockIdx.x;
    MaxSum acc = row_max_sum(reinterpret_cast<const uint4 *>(logits + row * (size_t)ld), V);
    if (threadIdx.x == 0) {
        float l = acc.m + logf(acc.s);
        lse[row] = l;
        losses[row] = l - __bfloat162float(logits[row * (size_t)ld + targets[row]]);
    }
}

/* block (CE_THREADS) per row, in place: x = dloss * (exp(x - lse) - [j == target]) */
__global__ void __launch_bounds__(CE_THREADS)
    crossentropy_backward_vec_kernel(bf16 *logits, const float *lse, const int32_t *targets,
                                     float dloss, int V, int ld) {
    size_t row = blockIdx.x;
    row_softmax_grad(reinterpret_cast<uint4 *>(logits + row * (size_t)ld), V, lse[row],
                     targets[row], dloss);
}

/* block (CE_THREADS) per row, both of the above in one kernel: the loss, then the row rewritten
 * in place as softmax - onehot (unscaled: the head's products apply dloss as their alpha). The
 * second pass re-reads the row this block just read (100 KB for GPT-2's vocabulary), mostly
 * from L2, so the logits cross DRAM about once each way instead of twice in and once out (H200,
 * 1.5B: the step within noise of the separate passes). */
__global__ void __launch_bounds__(CE_THREADS)
    crossentropy_fused_vec_kernel(bf16 *logits, float *losses, const int32_t *targets, int V,
                                  int ld) {
    size_t row = blockIdx.x;
    uint4 *x = reinterpret_cast<uint4 *>(logits + row * (size_t)ld);
    int tgt = targets[row];
    float target_logit = __bfloat162float(logits[row * (size_t)ld + tgt]); /* before any write */
    MaxSum acc = row_max_sum(x, V); /* ends past a block barrier: no write races a read */
    float l = acc.m + logf(acc.s);
    if (threadIdx.x == 0) losses[row] = l - target_logit;
    row_softmax_grad(x, V, l, tgt, 1.0f);
}

/* one block: mean of n floats */
__global__ void mean_kernel(float *out, const float *x, int n) {
    __shared__ float shared[32];
    float acc = 0.0f;
    for (int i = threadIdx.x; i < n; i += blockDim.x) acc += x[i];
    for (int o = 16; o > 0; o >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, o);
    if (threadIdx.x % 32 == 0) shared[threadIdx.x / 32] = acc;
    __syncthreads();
    if (threadIdx.x < 32) {
        acc = threadIdx.x < blockDim.x / 32 ? shared[threadIdx.x] : 0.0f;
        for (int o = 16; o > 0; o >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, o);
        if (threadIdx.x == 0) out[0] = acc / n;
    }
}

/* The rows' stride: whole 16-byte vectors, room for the V logits. */
static bool ld_ok(int V, int ld) { return V >= 1 && ld >= V && ld % 8 == 0; }

extern "C" cudaError_t gt_cu_crossentropy_forward(float *lse, float *losses,
                                                  const gt_bf16 *logits, const int32_t *targets,
                                                  int N, int V, int ld,
                                                  cudaStream_t stream) {
    if (!ld_ok(V, ld)) return cudaErrorInvalidValue;
    crossentropy_forward_vec_kernel<<<N, CE_THREADS, 0, stream>>>(
        lse, losses, (const bf16 *)logits, targets, V, ld);
    return cudaGetLastError();
}

extern "C" cudaError_t gt_cu_crossentropy_backward(gt_bf16 *logits, const float *lse,
                                                   const int32_t *targets, float dloss, int N,
                                                   int V, int ld, cudaStream_t stream) {
    if (!ld_ok(V, ld)) return cudaErrorInvalidValue;
    crossentropy_backward_vec_kernel<<<N, CE_THREADS, 0, stream>>>((bf16 *)logits, lse, targets,
                                                                   dloss, V, ld);
    return cudaGetLastError();
}

extern "C" cudaError_t gt_cu_crossentropy_fused(float *losses, gt_bf16 *logits,
                                                const int32_t *targets, int N, int V, int ld,
                                                cudaStream_t stream) {
    if (!ld_ok(V, ld)) return cudaErrorInvalidValue;
    crossentropy_fused_vec_kernel<<<N, CE_THREADS, 0, stream>>>((bf16 *)logits, losses, targets,
                                                                V, ld);
    return cudaGetLastError();
}

extern "C" cudaError_t gt_cu_mean(float *out, const float *x, int n, cudaStream_t stream) {
    mean_kernel<<<1, 1024, 0, stream>>>(out, x, n);
    return cudaGetLastError();
}
