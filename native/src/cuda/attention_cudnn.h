/*
 * attention_cudnn.h — fused causal flash attention (forward and backward) through cuDNN's SDPA
 * graphs (cudnn-frontend, header-only C++), behind a C interface for stage_cuda.c.
 *
 * Layouts (no permutes needed): qkv (B,T,3,NH,hs) bf16 as produced by c_attn; out (B,T,NH,hs)
 * bf16 = the (N,C) input of c_proj; stats (B,NH,T) fp32 log-sum-exp kept for backward;
 * dqkv like qkv. Graphs are built once per shape and cached in the context.
 */
#ifndef GANTRY_CUDA_ATTENTION_CUDNN_H
#define GANTRY_CUDA_ATTENTION_CUDNN_H

#include <cuda_runtime_api.h>
#include <stddef.h>

#include "cuda/kernels.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct gt_cudnn_attn gt_cudnn_attn;

/* Each returns 0 on success, else nonzero with a message in err (NUL-terminated). autotune
 * (GANTRY_ATTN_AUTOTUNE): time every plan once per shape and keep the fastest, else cuDNN's
 * heuristic choice. */
int gt_cudnn_attn_create(gt_cudnn_attn **out, int autotune, char *err, size_t err_len);
void gt_cudnn_attn_destroy(gt_cudnn_attn *ctx);
/* The loaded cuDNN library's version (cudnnGetVersion, e.g. 91400 for 9.14.0). */
size_t gt_cudnn_version(void);
/* 1 if cuDNN supports this head size and shape (probes by building the graphs). */
int gt_cudnn_attn_supported(gt_cudnn_attn *ctx, int B, int T, int NH, int hs, char *err,
                            size_t err_len);
int gt_cudnn_attn_forward(gt_cudnn_attn *ctx, gt_bf16 *out, float *stats, const gt_bf16 *qkv,
                          int B, int T, int NH, int hs, cudaStream_t stream, char *err,
                          size_t err_len);
int gt_cudnn_attn_backward(gt_cudnn_attn *ctx, gt_bf16 *dqkv, const gt_bf16 *dout,
                           const gt_bf16 *qkv, const gt_bf16 *out, const float *stats, int B,
                           int T, int NH, int hs, cudaStream_t stream, char *err,
                           size_t err_len);

#ifdef __cplusplus
}
#endif

#endif /* GANTRY_CUDA_ATTENTION_CUDNN_H */
