/*
 * adamw.cu — the optimizer's kernels (kernels.h): AdamW over a range of the parameter buffer
 * with the squares of its raw gradients on the side, the gradient norm's sum of squares in
 * double, the sum of the per-block partials, and the zeroing of gradient chunks. Fixed
 * partitions and orders: the same bits every run.
 */
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "kernels_common.cuh"

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
