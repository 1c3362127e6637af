/*
 * kernels.h — the CUDA kernels of one GPT-2 stage, as C-callable launchers: convert.cu,
 * embedding.cu, layernorm_forward.cu, layernorm_backward.cu, gelu.cu, attention_reference.cu,
 * adamw.cu and crossentropy.cu (kernels_common.cuh holds what they share).
 *
 * Every launcher enqueues on `stream`, returns the launch status (cudaGetLastError) and never
 * synchronizes. Activations are bf16 (gt_bf16 is its 16-bit storage type on the C side), all
 * statistics and gradients of parameters fp32, math inside kernels fp32.
 * Shapes: B batch, T sequence, C channels, NH heads, hs = C/NH, V vocabulary, N = B*T rows.
 * "+=" marks outputs accumulated into. Reductions use a fixed partition and order and no atomics,
 * so results are bit-reproducible run to run.
 */
#ifndef GANTRY_CUDA_KERNELS_H
#define GANTRY_CUDA_KERNELS_H

#include <cuda_runtime_api.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef uint16_t gt_bf16; /* storage of one bfloat16 */

/* Reads the current device's SM count, which sizes the grid-stride and one-wave launches below;
 * call it once before them (stage creation does). */
cudaError_t gt_cu_kernels_init(void);

/* Rows per block-row of the two-phase column sums; partial buffers hold
 * GT_CU_COLSUM_CHUNKS * C floats per reduced vector. */
#define GT_CU_COLSUM_CHUNKS 64
/* The most blocks (and partial vectors) of the one-pass LayerNorm backward (one wave of
 * blocks, capped here). */
#define GT_CU_LN_BWD_MAX_BLOCKS 1024
/* Scratch floats of gt_cu_layernorm_backward for width C (four partial vectors per block). */
#define GT_CU_LN_BWD_SCRATCH(C) ((size_t)4 * GT_CU_LN_BWD_MAX_BLOCKS * (size_t)(C))

/* dst (n) bf16 = src (n) fp32, round to nearest even */
cudaError_t gt_cu_f32_to_bf16(gt_bf16 *dst, const float *src, size_t n, cudaStream_t stream);
/* dst (n) fp32 = src (n) bf16 */
cudaError_t gt_cu_bf16_to_f32(float *dst, const gt_bf16 *src, size_t n, cudaStream_t stream);

/* out (N,C) = wte[tokens] (V,C) + wpe[t] (maxT,C) */
cudaError_t gt_cu_encoder_forward(gt_bf16 *out, const int32_t *tokens, const gt_bf16 *wte,
                                  const gt_bf16 *wpe, int B, int T, int C, cudaStream_t stream);
/* dwpe (maxT,C) += sum_b dout[b,t]; dwte (V,C) += dout rows grouped by token:
 * groups: *n_groups (device int, <= max_groups) unique tokens; group g has token
 * group_token[g] and positions group_pos[group_start[g] .. group_start[g+1]) in increasing
 * order (built on the host). The count is read on the device, so a captured launch stays right
 * for the next micro-batch's tokens. */
cudaError_t gt_cu_encoder_backward(float *dwte, float *dwpe, const gt_bf16 *dout,
                                   const int32_t *group_token, const int32_t *group_start,
                                   const int32_t *group_pos, const int32_t *n_groups,
                                   int max_groups, int B, int T, int C, cudaStream_t stream);

/* Extra columns of the layers' LayerNorm outputs: a constant 1 (column C), then zeros that keep
 * rows 16-byte aligned and the weight-gradient products' column count a multiple of 8
 * (compute_cuda.c). */
#define GT_CU_LN_PAD 8

/* out (N,C) = (inp - mean) * rstd * w + b; mean, rstd (N) fp32 saved for backward. out has
 * rows of out_ld >= C elements (columns C.. untouched: room for a constant column). */
cudaError_t gt_cu_layernorm_forward(gt_bf16 *out, int out_ld, float *mean, float *rstd,
                                    const gt_bf16 *inp, const gt_bf16 *w, const gt_bf16 *b, int N,
                                    int C, cudaStream_t stream);
/* sum (N,C) = bf16(inp + add), then out = LayerNorm(sum) as gt_cu_layernorm_forward, in one pass
 * over the rows (the residual add of the product before the LayerNorm); add and sum NULL: the
 * LayerNorm of inp alone (gt_cu_layernorm_forward) */
cudaError_t gt_cu_layernorm_forward_residual(gt_bf16 *out, int out_ld, float *mean, float *rstd,
                                             gt_bf16 *sum, const gt_bf16 *inp,
                                             const gt_bf16 *add, const gt_bf16 *w,
                                             const gt_bf16 *b, int N, int C,
                                             cudaStream_t stream);
/* x (n) = scale * uniform [-1, 1) from a hash of (seed, index): timing operands, not zeros */
cudaError_t gt_cu_fill_uniform(gt_bf16 *x, size_t n, uint32_t seed, float scale,
                               cudaStream_t stream);
/* For rows r < rows (bf16): x[r * ld + col] = 1 and x[r * ld + col + 1 .. r * ld + ld) = 0 */
cudaError_t gt_cu_set_ones_column(gt_bf16 *x, int rows, int ld, int col, cudaStream_t stream);
/* dinp (N,C) = dresid (N,C) + d LN/d inp given dout (N,C); dinp may alias dresid */
cudaError_t gt_cu_layernorm_backward_input(gt_bf16 *dinp, const gt_bf16 *dresid,
                                           const gt_bf16 *dout, const gt_bf16 *inp,
                                           const float *mean, const float *rstd,
                                           const gt_bf16 *w, int N, int C, cudaStream_t stream);
/* dw (C) += sum_n dout * xhat, db (C) += sum_n dout; scratch: 2 * GT_CU_COLSUM_CHUNKS * C */
cudaError_t gt_cu_layernorm_backward_weight(float *dw, float *db, const gt_bf16 *dout,
                                            const gt_bf16 *inp, const float *mean,
                                            const float *rstd, int N, int C, float *scratch,
                                            cudaStream_t stream);
/* Both of the above in one pass over dout and inp: dinp as gt_cu_layernorm_backward_input,
 * dw and db accumulated as gt_cu_layernorm_backward_weight (the same sums, another order).
 * Optionally also the column sums of the residual gradient and of the result, which are the
 * bias gradients of the products that read them (a transformer block's LayerNorm 2: dresid is
 * the fc-proj output's gradient, dinp the attention projection's): sum_resid (C) +=
 * sum_n dresid, sum_inp (C) += sum_n dinp (each NULL: not computed; sum_resid needs dresid).
 * scratch: GT_CU_LN_BWD_SCRATCH(C) floats */
cudaError_t gt_cu_layernorm_backward(gt_bf16 *dinp, const gt_bf16 *dresid, const gt_bf16 *dout,
                                     const gt_bf16 *inp, const float *mean, const float *rstd,
                                     const gt_bf16 *w, float *dw, float *db, float *sum_resid,
                                     float *sum_inp, int N, int C, float *scratch,
                                     cudaStream_t stream);
/* Where the rows fit registers (C % 8 == 0, C <= 2048, 16-byte aligned pointers) the one pass
 * is block-cooperative: a thread per 16-byte column vector, 4 rows per step without the bias
 * sums and 2 with them, column sums in registers, one wave of blocks; elsewhere separate input
 * and column-sum passes. Other kernels for it, timed beside this one by gantry-kernel-bench:
 * native/dev/cuda/layernorm_backward_variants.h. */
/* dbias (OC) += sum_n dout (N,OC); scratch: GT_CU_COLSUM_CHUNKS * OC floats */
cudaError_t gt_cu_bias_backward(float *dbias, const gt_bf16 *dout, int N, int OC, float *scratch,
                                cudaStream_t stream);

/* tanh-GELU: out (n) = gelu(inp); backward in place: d (n) = gelu'(pre) * d */
cudaError_t gt_cu_gelu_forward(gt_bf16 *out, const gt_bf16 *inp, size_t n, cudaStream_t stream);
cudaError_t gt_cu_gelu_backward_inplace(gt_bf16 *d, const gt_bf16 *pre, size_t n,
                                        cudaStream_t stream);
/* out (n) = a + b */
cudaError_t gt_cu_residual_forward(gt_bf16 *out, const gt_bf16 *a, const gt_bf16 *b, size_t n,
                                   cudaStream_t stream);

/* Reference attention helpers (materialized scores).
 * qkv (B,T,3,NH,hs) -> q, k, v (B,NH,T,hs) each */
cudaError_t gt_cu_attn_permute(gt_bf16 *q, gt_bf16 *k, gt_bf16 *v, const gt_bf16 *qkv, int B,
                               int T, int NH, int hs, cudaStream_t stream);
/* y (B,NH,T,hs) -> out (B,T,NH,hs) */
cudaError_t gt_cu_attn_unpermute(gt_bf16 *out, const gt_bf16 *y, int B, int T, int NH, int hs,
                                 cudaStream_t stream);
/* dq, dk, dv (B,NH,T,hs) -> dqkv (B,T,3,NH,hs) */
cudaError_t gt_cu_attn_permute_backward(gt_bf16 *dqkv, const gt_bf16 *dq, const gt_bf16 *dk,
                                        const gt_bf16 *dv, int B, int T, int NH, int hs,
                                        cudaStream_t stream);
/* dy (B,NH,T,hs) <- dout (B,T,NH,hs) */
cudaError_t gt_cu_attn_unpermute_backward(gt_bf16 *dy, const gt_bf16 *dout, int B, int T, int NH,
                                          int hs, cudaStream_t stream);
/* att (BH,T,T) = causal softmax(scale * preatt) (rows t: columns > t are 0) */
cudaError_t gt_cu_causal_softmax_forward(gt_bf16 *att, const gt_bf16 *preatt, float scale,
                                         int BH, int T, cudaStream_t stream);
/* dpreatt (BH,T,T) = scale * att * (datt - sum_j att*datt) (causal; upper triangle 0) */
cudaError_t gt_cu_causal_softmax_backward(gt_bf16 *dpreatt, const gt_bf16 *datt,
                                          const gt_bf16 *att, float scale, int BH, int T,
                                          cudaStream_t stream);

/* Cross-entropy over bf16 logits: N rows of V logits, ld apart (ld % 8 == 0, ld >= V; the
 * padded columns [V, ld) are outside the softmax and never read as logits).
 * lse (N) = logsumexp, losses (N) = lse - logit[target] */
cudaError_t gt_cu_crossentropy_forward(float *lse, float *losses, const gt_bf16 *logits,
                                       const int32_t *targets, int N, int V, int ld,
                                       cudaStream_t stream);
/* In place: logits (N,V) -> dlogits = (softmax - onehot(target)) * dloss; padded columns 0 */
cudaError_t gt_cu_crossentropy_backward(gt_bf16 *logits, const float *lse, const int32_t *targets,
                                        float dloss, int N, int V, int ld, cudaStream_t stream);
/* Both in one pass (training): losses (N) as gt_cu_crossentropy_forward, and in place logits ->
 * softmax - onehot(target), NOT scaled (the consumers scale by dloss); padded columns 0 */
cudaError_t gt_cu_crossentropy_fused(float *losses, gt_bf16 *logits, const int32_t *targets,
                                     int N, int V, int ld, cudaStream_t stream);
/* Zeroes n chunks of base: chunks holds (offset, count) pairs, count <= 16384 floats each. */
cudaError_t gt_cu_zero_chunks(float *base, const uint64_t *chunks, int n, cudaStream_t stream);
/* out (1) = sum of x (n) / n, fixed order (one block) */
cudaError_t gt_cu_mean(float *out, const float *x, int n, cudaStream_t stream);

/* Sum of squares of x[begin, end) in double; partial: GT_CU_SQ_BLOCKS doubles; out (1) */
#define GT_CU_SQ_BLOCKS 1056 /* 8 per SM of an H200 */
cudaError_t gt_cu_sq_sum(double *out, double *partial, const float *x, size_t n,
                         cudaStream_t stream);

/* AdamW over elements [begin, begin + n) of the buffers (torch.optim.AdamW semantics, see
 * stage.h); segments: the whole buffer is cut into n_segments runs [seg_end[i-1], seg_end[i])
 * with weight decay seg_decay[i] (0/1). Also writes the bf16 copy of the updated parameters into
 * params16. Each element's math does not depend on the range, so ranges give the same bits. */
typedef struct {
    float lr, beta1, beta2, eps, weight_decay, grad_scale;
    float step_size, bc2_sqrt, one_minus_beta1, one_minus_beta2;
} gt_cu_adamw_args;
cudaError_t gt_cu_adamw(float *params, gt_bf16 *params16, const float *grads, float *m, float *v,
                        size_t begin, size_t n, const uint64_t *seg_end, const uint8_t *seg_decay,
                        int n_segments, gt_cu_adamw_args args, double *sq_partial,
                        cudaStream_t stream);
/* With sq_partial (gt_cu_adamw_grid_blocks(num_params) doubles) gt_cu_adamw also adds the sum
 * of squares of the raw gradients (before grad_scale) of each 4096-element block of the buffer
 * to sq_partial[block]: ranges that together cover elements once give, after
 * gt_cu_sum_doubles, their sum of squares, the same bits for the same ranges every run. */
size_t gt_cu_adamw_grid_blocks(size_t num_params);
/* out (1) = the sum of x (n), fixed order (one block) */
cudaError_t gt_cu_sum_doubles(double *out, const double *x, size_t n, cudaStream_t stream);

#ifdef __cplusplus
}
#endif

#endif /* GANTRY_CUDA_KERNELS_H */
