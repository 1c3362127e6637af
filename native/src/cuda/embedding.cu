/*
 * embedding.cu — the token and position embeddings of stage 0: the forward gather and the
 * backward's deterministic sums (wte per token group, wpe per position; kernels.h).
 */
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "kernels_common.cuh"

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
