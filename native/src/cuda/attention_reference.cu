/*
 * attention_reference.cu — the reference attention's helpers (materialized scores): the
 * q / k / v permutes of the fused qkv and their inverses, and the causal softmax with its
 * backward (kernels.h). cuDNN flash attention replaces them where the build has it.
 */
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <float.h>
#include <math.h>

#include "kernels_common.cuh"

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
