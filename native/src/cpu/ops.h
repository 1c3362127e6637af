/*
 * ops.h — the CPU kernels of one GPT-2 stage (fp32, OpenMP loops, CBLAS matrix products).
 *
 * Shapes in comments: B batch, T sequence, C channels, NH heads, hs = C/NH head size,
 * V vocabulary, N = B*T rows. "+=" marks outputs that are accumulated into.
 * Every reduction has a fixed partition and order, so results are bit-reproducible.
 */
#ifndef GANTRY_CPU_OPS_H
#define GANTRY_CPU_OPS_H

#include <stddef.h>
#include <stdint.h>

/* Rows per block of the fixed-partition column sums (the partition never depends on threads). */
#define GT_COLSUM_CHUNKS 64

/* out (B,T,C) = wte[tokens] (V,C) + wpe[t] (maxT,C) */
void gt_encoder_forward(float *out, const int32_t *tokens, const float *wte, const float *wpe,
                        int B, int T, int C);
/* dwte (V,C) +=, dwpe (maxT,C) += from dout (B,T,C) */
void gt_encoder_backward(float *dwte, float *dwpe, const float *dout, const int32_t *tokens,
                         int B, int T, int C);

/* out (N,C) = (inp - mean) * rstd * w + b; mean, rstd (N) saved for backward */
void gt_layernorm_forward(float *out, float *mean, float *rstd, const float *inp, const float *w,
                          const float *b, size_t N, int C);
/* dinp (N,C) += d/dinp given dout (N,C) */
void gt_layernorm_backward_input(float *dinp, const float *dout, const float *inp,
                                 const float *mean, const float *rstd, const float *w, size_t N,
                                 int C);
/* dw (C) += sum_n dout*xhat, db (C) += sum_n dout; scratch: 2*GT_COLSUM_CHUNKS*C floats */
void gt_layernorm_backward_weight(float *dw, float *db, const float *dout, const float *inp,
                                  const float *mean, const float *rstd, size_t N, int C,
                                  float *scratch);

/* out (N,OC) = inp (N,IC) @ W (IC,OC) + bias (OC) (bias may be NULL) */
void gt_matmul_forward(float *out, const float *inp, const float *W, const float *bias, size_t N,
                       int IC, int OC);
/* dinp (N,IC) = dout (N,OC) @ W^T, or += when accumulate != 0 */
void gt_matmul_backward_input(float *dinp, const float *dout, const float *W, size_t N, int IC,
                              int OC, int accumulate);
/* dW (IC,OC) += inp^T @ dout; dbias (OC) += sum_n dout (dbias may be NULL);
 * scratch: GT_COLSUM_CHUNKS*OC floats */
void gt_matmul_backward_weight(float *dW, float *dbias, const float *dout, const float *inp,
                               size_t N, int IC, int OC, float *scratch);

/* dst (C) += sum over rows of src (N,C); scratch: GT_COLSUM_CHUNKS*C floats */
void gt_colsum_accumulate(float *dst, const float *src, size_t N, int C, float *scratch);

/* Causal self-attention. qkv (B,T,3C) = [q | k | v], head h at columns h*hs..;
 * att (B,NH,T,T) softmax probabilities (upper triangle zero); out (B,T,C). */
void gt_attention_forward(float *out, float *att, const float *qkv, int B, int T, int C, int NH);
/* dqkv (B,T,3C) = (overwritten) from dout (B,T,C); scratch: T*T floats */
void gt_attention_backward(float *dqkv, const float *dout, const float *qkv, const float *att,
                           int B, int T, int C, int NH, float *scratch);

/* tanh-approximated GELU, elementwise over n */
void gt_gelu_forward(float *out, const float *inp, size_t n);
/* dinp (n) = (overwritten) gelu'(inp) * dout */
void gt_gelu_backward(float *dinp, const float *inp, const float *dout, size_t n);

/* out (n) = a + b */
void gt_residual_forward(float *out, const float *a, const float *b, size_t n);

/* Tied output head. logits (N,V) = inp (N,C) @ wte^T (wte (V,C)) */
void gt_head_forward(float *logits, const float *inp, const float *wte, size_t N, int C, int V);
/* dinp (N,C) = dlogits (N,V) @ wte (V,C) */
void gt_head_backward_input(float *dinp, const float *dlogits, const float *wte, size_t N, int C,
                            int V);
/* dwte (V,C) += dlogits^T (V,N) @ inp (N,C) */
void gt_head_backward_weight(float *dwte, const float *dlogits, const float *inp, size_t N, int C,
                             int V);

/* In place: logits (N,V) -> probs; losses (N) = -log probs[target]; returns mean loss
 * (summed in double, row order). */
float gt_softmax_crossentropy_forward(float *probs_inout, float *losses, const int32_t *targets,
                                      size_t N, int V);
/* In place: probs (N,V) -> dlogits = (probs - onehot(target)) * dloss */
void gt_softmax_crossentropy_backward(float *probs_inout, const int32_t *targets, size_t N, int V,
                                      float dloss);

#endif /* GANTRY_CPU_OPS_H */
