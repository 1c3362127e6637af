/*
 * gelu.cu — tanh-GELU forward and its in-place backward, and the residual add (kernels.h);
 * grid-stride loops over bf16 elements, fp32 math.
 */
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <math.h>

#include "kernels_common.cuh"

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

extern "C" cudaError_t gt_cu_residual_forward(gt_bf16 *out, const gt_bf16 *a, const gt_bf16 *b,
                                              size_t n, cudaStream_t stream) {
    residual_kernel<<<grid_for(n), 256, 0, stream>>>((bf16 *)out, (const bf16 *)a,
                                                     (const bf16 *)b, n);
    return cudaGetLastError();
}
