/*
 * layernorm_backward_variants.h — the LayerNorm backward variants of the dev tools
 * (layernorm_backward_variants.cu), callable from C and CUDA like the library's kernels.h.
 */
#ifndef GANTRY_DEV_LAYERNORM_BACKWARD_VARIANTS_H
#define GANTRY_DEV_LAYERNORM_BACKWARD_VARIANTS_H

#include "kernels.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Blocks of impl 1 that gantry-kernel-bench times and checks against by default. */
#define GT_DEV_LN_BWD_BLOCKS 512
/* Impl 1, 2 or 3 of gt_cu_layernorm_backward (same arguments, outputs and scratch,
 * GT_CU_LN_BWD_SCRATCH(C)); blocks: impl 1's block count (1..GT_CU_LN_BWD_MAX_BLOCKS, others
 * ignore it). Another impl: cudaErrorInvalidValue. */
cudaError_t gt_dev_layernorm_backward(int impl, int blocks, gt_bf16 *dinp, const gt_bf16 *dresid,
                                      const gt_bf16 *dout, const gt_bf16 *inp, const float *mean,
                                      const float *rstd, const gt_bf16 *w, float *dw, float *db,
                                      float *sum_resid, float *sum_inp, int N, int C,
                                      float *scratch, cudaStream_t stream);

#ifdef __cplusplus
}
#endif

#endif /* GANTRY_DEV_LAYERNORM_BACKWARD_VARIANTS_H */
