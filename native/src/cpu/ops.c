/*
 * ops.c — CPU kernels of one GPT-2 stage: embeddings, LayerNorm, linear layers (CBLAS),
 * causal attention, GELU, residual and the softmax cross-entropy head. See ops.h for shapes.
 *
 * Parallel loops use OpenMP with disjoint outputs per iteration; reductions over rows go through
 * a fixed partition of GT_COLSUM_CHUNKS row blocks summed in block order, so every result is
 * independent of scheduling (and, for column sums, of the thread count).
 */
#include "ops.h"

#include <math.h>
#include <string.h>

#include <cblas.h>

/* ------------------------------------------------------------------------------------------ */
/* embeddings                                                                                  */

void gt_encoder_forward(float *out, const int32_t *tokens, const float *wte, const float *wpe,
                        int B, int T, int C) {
#pragma omp parallel for collapse(2) schedule(static)
    for (int b = 0; b < B; b++) {
        for (int t = 0; t < T; t++) {
            float *out_bt = out + ((size_t)b * T + t) * C;
            const float *wte_ix = wte + (size_t)tokens[b * T + t] * C;
            const float *wpe_t = wpe + (size_t)t * C;
            for (int c = 0; c < C; c++) out_bt[c] = wte_ix[c] + wpe_t[c];
        }
    }
}

void gt_encoder_backward(float *dwte, float *dwpe, const float *dout, const int32_t *tokens,
                         int B, int T, int C) {
    /* dwpe: parallel over t, batch summed in order */
#pragma omp parallel for schedule(static)
    for (int t = 0; t < T; t++) {
        float *dwpe_t = dwpe + (size_t)t * C;
        for (int b = 0; b < B; b++) {
            const float *dout_bt = dout + ((size_t)b * T + t) * C;
            for (int c = 0; c < C; c++) dwpe_t[c] += dout_bt[c];
        }
    }
    /* dwte: rows may repeat across positions; serial scatter in (b,t) order */
    for (int bt = 0; bt < B * T; bt++) {
        float *dwte_ix = dwte + (size_t)tokens[bt] * C;
        const float *dout_bt = dout + (size_t)bt * C;
        for (int c = 0; c < C; c++) dwte_ix[c] += dout_bt[c];
    }
}

/* ------------------------------------------------------------------------------------------ */
/* fixed-partition column sums                                                                 */

static size_t chunk_rows(size_t N) { return (N + GT_COLSUM_CHUNKS - 1) / GT_COLSUM_CHUNKS; }

void gt_colsum_accumulate(float *dst, const float *src, size_t N, int C, float *scratch) {
    size_t rows = chunk_rows(N);
    /* scratch (GT_COLSUM_CHUNKS, C): partial sums of each row block */
#pragma omp parallel for schedule(static)
    for (int k = 0; k < GT_COLSUM_CHUNKS; k++) {
        float *part = scratch + (size_t)k * C;
        for (int c = 0; c < C; c++) part[c] = 0.0f;
        size_t end = (size_t)(k + 1) * rows < N ? (size_t)(k + 1) * rows : N;
        for (size_t n = (size_t)k * rows; n < end; n++) {
            const float *row = src + n * C;
            for (int c = 0; c < C; c++) part[c] += row[c];
        }
    }
#pragma omp parallel for schedule(static)
    for (int c = 0; c < C; c++) {
        float sum = 0.0f;
        for (int k = 0; k < GT_COLSUM_CHUNKS; k++) sum += scratch[(size_t)k * C + c];
        dst[c] += sum;
    }
}

/* ------------------------------------------------------------------------------------------ */
/* LayerNorm                                                                                   */

#define GT_LN_EPS 1e-5

void gt_layernorm_forward(float *out, float *mean, float *rstd, const float *inp, const float *w,
                          const float *b, size_t N, int C) {
#pragma omp parallel for schedule(static)
    for (size_t n = 0; n < N; n++) {
        const float *x = inp + n * C;
        double sum = 0.0;
        for (int c = 0; c < C; c++) sum += x[c];
        double m = sum / C;
        double var = 0.0;
        for (int c = 0; c < C; c++) {
            double d = x[c] - m;
            var += d * d;
        }
        var /= C;
        double s = 1.0 / sqrt(var + GT_LN_EPS);
        float mf = (float)m, sf = (float)s;
        float *o = out + n * C;
        for (int c = 0; c < C; c++) o[c] = (x[c] - mf) * sf * w[c] + b[c];
        mean[n] = mf;
        rstd[n] = sf;
    }
}

void gt_layernorm_backward_input(float *dinp, const float *dout, const float *inp,
                                 const float *mean, const float *rstd, const float *w, size_t N,
                                 int C) {
#pragma omp parallel for schedule(static)
    for (size_t n = 0; n < N; n++) {
        const float *dy = dout + n * C;
        const float *x = inp + n * C;
        float m = mean[n], s = rstd[n];
        double dnorm_mean = 0.0, dnorm_xhat_mean = 0.0;
        for (int c = 0; c < C; c++) {
            float xhat = (x[c] - m) * s;
            float dnorm = w[c] * dy[c];
            dnorm_mean += dnorm;
            dnorm_xhat_mean += (double)dnorm * xhat;
        }
        float a = (float)(dnorm_mean / C), bm = (float)(dnorm_xhat_mean / C);
        float *dx = dinp + n * C;
        for (int c = 0; c < C; c++) {
            float xhat = (x[c] - m) * s;
            float dnorm = w[c] * dy[c];
            dx[c] += s * (dnorm - a - xhat * bm);
        }
    }
}

void gt_layernorm_backward_weight(float *dw, float *db, const float *dout, const float *inp,
                                  const float *mean, const float *rstd, size_t N, int C,
                                  float *scratch) {
    size_t rows = chunk_rows(N);
    float *part_w = scratch;                             /* (GT_COLSUM_CHUNKS, C) */
    float *part_b = scratch + (size_t)GT_COLSUM_CHUNKS * C; /* (GT_COLSUM_CHUNKS, C) */
#pragma omp parallel for schedule(static)
    for (int k = 0; k < GT_COLSUM_CHUNKS; k++) {
        float *pw = part_w + (size_t)k * C, *pb = part_b + (size_t)k * C;
        for (int c = 0; c < C; c++) pw[c] = pb[c] = 0.0f;
        size_t end = (size_t)(k + 1) * rows < N ? (size_t)(k + 1) * rows : N;
        for (size_t n = (size_t)k * rows; n < end; n++) {
            const float *dy = dout + n * C, *x = inp + n * C;
            float m = mean[n], s = rstd[n];
            for (int c = 0; c < C; c++) {
                pw[c] += dy[c] * ((x[c] - m) * s);
                pb[c] += dy[c];
            }
        }
    }
#pragma omp parallel for schedule(static)
    for (int c = 0; c < C; c++) {
        float sw = 0.0f, sb = 0.0f;
        for (int k = 0; k < GT_COLSUM_CHUNKS; k++) {
            sw += part_w[(size_t)k * C + c];
            sb += part_b[(size_t)k * C + c];
        }
        dw[c] += sw;
        db[c] += sb;
    }
}

/* ------------------------------------------------------------------------------------------ */
/* linear layers (Conv1D layout: W (IC, OC))                                                   */

void gt_matmul_forward(float *out, const float *inp, const float *W, const float *bias, size_t N,
                       int IC, int OC) {
    float beta = 0.0f;
    if (bias != NULL) {
#pragma omp parallel for schedule(static)
        for (size_t n = 0; n < N; n++) memcpy(out + n * OC, bias, (size_t)OC * sizeof(float));
        beta = 1.0f;
    }
    /* out (N,OC) = inp (N,IC) @ W (IC,OC) + beta * out */
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)N, OC, IC, 1.0f, inp, IC, W, OC,
                beta, out, OC);
}

void gt_matmul_backward_input(float *dinp, const float *dout, const float *W, size_t N, int IC,
                              int OC, int accumulate) {
    /* dinp (N,IC) = dout (N,OC) @ W^T (OC,IC) */
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)N, IC, OC, 1.0f, dout, OC, W, OC,
                accumulate ? 1.0f : 0.0f, dinp, IC);
}

void gt_matmul_backward_weight(float *dW, float *dbias, const float *dout, const float *inp,
                               size_t N, int IC, int OC, float *scratch) {
    /* dW (IC,OC) += inp^T (IC,N) @ dout (N,OC) */
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, IC, OC, (int)N, 1.0f, inp, IC, dout, OC,
                1.0f, dW, OC);
    if (dbias != NULL) gt_colsum_accumulate(dbias, dout, N, OC, scratch);
}

/* ------------------------------------------------------------------------------------------ */
/* causal self-attention                                                                       */

void gt_attention_forward(float *out, float *att, const float *qkv, int B, int T, int C, int NH) {
    int hs = C / NH;
    size_t C3 = (size_t)3 * C;
    float scale = 1.0f / sqrtf((float)hs);
#pragma omp parallel for collapse(3) schedule(static)
    for (int b = 0; b < B; b++) {
        for (int h = 0; h < NH; h++) {
            for (int t = 0; t < T; t++) {
                const float *q = qkv + ((size_t)b * T + t) * C3 + (size_t)h * hs;
                float *att_row = att + (((size_t)b * NH + h) * T + t) * T; /* (T) */
                float maxval = -INFINITY;
                for (int t2 = 0; t2 <= t; t2++) {
                    const float *k = qkv + ((size_t)b * T + t2) * C3 + C + (size_t)h * hs;
                    float dot = 0.0f;
                    for (int i = 0; i < hs; i++) dot += q[i] * k[i];
                    dot *= scale;
                    att_row[t2] = dot;
                    if (dot > maxval) maxval = dot;
                }
                double sum = 0.0;
                for (int t2 = 0; t2 <= t; t2++) {
                    float e = expf(att_row[t2] - maxval);
                    att_row[t2] = e;
                    sum += e;
                }
                float inv = (float)(1.0 / sum);
                for (int t2 = 0; t2 <= t; t2++) att_row[t2] *= inv;
                for (int t2 = t + 1; t2 < T; t2++) att_row[t2] = 0.0f;
                float *o = out + ((size_t)b * T + t) * C + (size_t)h * hs;
                for (int i = 0; i < hs; i++) o[i] = 0.0f;
                for (int t2 = 0; t2 <= t; t2++) {
                    const float *v = qkv + ((size_t)b * T + t2) * C3 + 2 * (size_t)C + (size_t)h * hs;
                    float a = att_row[t2];
                    for (int i = 0; i < hs; i++) o[i] += a * v[i];
                }
            }
        }
    }
}

void gt_attention_backward(float *dqkv, const float *dout, const float *qkv, const float *att,
                           int B, int T, int C, int NH, float *scratch) {
    int hs = C / NH;
    size_t C3 = (size_t)3 * C;
    float scale = 1.0f / sqrtf((float)hs);
    /* each (b,h) writes only its own columns of dqkv: parallel without races */
#pragma omp parallel for collapse(2) schedule(static)
    for (int b = 0; b < B; b++) {
        for (int h = 0; h < NH; h++) {
            float *dpre = scratch + ((size_t)b * NH + h) * T; /* (T) */
            for (int t = 0; t < T; t++) {
                float *dq = dqkv + ((size_t)b * T + t) * C3 + (size_t)h * hs;
                float *dk = dq + C, *dv = dq + 2 * (size_t)C;
                for (int i = 0; i < hs; i++) dq[i] = dk[i] = dv[i] = 0.0f;
            }
            for (int t = 0; t < T; t++) {
                const float *att_row = att + (((size_t)b * NH + h) * T + t) * T;
                const float *dy = dout + ((size_t)b * T + t) * C + (size_t)h * hs;
                const float *q = qkv + ((size_t)b * T + t) * C3 + (size_t)h * hs;
                float *dq = dqkv + ((size_t)b * T + t) * C3 + (size_t)h * hs;
                /* datt[t2] = dy . v[t2]; dv[t2] += att[t2] * dy */
                double dot_sum = 0.0;
                for (int t2 = 0; t2 <= t; t2++) {
                    const float *v = qkv + ((size_t)b * T + t2) * C3 + 2 * (size_t)C + (size_t)h * hs;
                    float *dv = dqkv + ((size_t)b * T + t2) * C3 + 2 * (size_t)C + (size_t)h * hs;
                    float datt = 0.0f;
                    float a = att_row[t2];
                    for (int i = 0; i < hs; i++) {
                        datt += dy[i] * v[i];
                        dv[i] += a * dy[i];
                    }
                    dpre[t2] = datt;
                    dot_sum += (double)a * datt;
                }
                /* softmax backward: dpre = att * (datt - sum(att * datt)), times the scale */
                float ds = (float)dot_sum;
                for (int t2 = 0; t2 <= t; t2++) dpre[t2] = att_row[t2] * (dpre[t2] - ds) * scale;
                for (int t2 = 0; t2 <= t; t2++) {
                    const float *k = qkv + ((size_t)b * T + t2) * C3 + C + (size_t)h * hs;
                    float *dk = dqkv + ((size_t)b * T + t2) * C3 + C + (size_t)h * hs;
                    float d = dpre[t2];
                    for (int i = 0; i < hs; i++) {
                        dq[i] += d * k[i];
                        dk[i] += d * q[i];
                    }
                }
            }
        }
    }
}

/* ------------------------------------------------------------------------------------------ */
/* GELU (tanh approximation) and residual                                                      */

#define GT_GELU_SCALE 0.7978845608028654f /* sqrt(2/pi) */

void gt_gelu_forward(float *out, const float *inp, size_t n) {
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++) {
        float x = inp[i];
        float cube = 0.044715f * x * x * x;
        out[i] = 0.5f * x * (1.0f + tanhf(GT_GELU_SCALE * (x + cube)));
    }
}

void gt_gelu_backward(float *dinp, const float *inp, const float *dout, size_t n) {
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++) {
        float x = inp[i];
        float cube = 0.044715f * x * x * x;
        float tanh_arg = GT_GELU_SCALE * (x + cube);
        float tanh_out = tanhf(tanh_arg);
        float sech2 = 1.0f - tanh_out * tanh_out;
        float grad = 0.5f * (1.0f + tanh_out) +
                     0.5f * x * sech2 * GT_GELU_SCALE * (1.0f + 3.0f * 0.044715f * x * x);
        dinp[i] = grad * dout[i];
    }
}

void gt_residual_forward(float *out, const float *a, const float *b, size_t n) {
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++) out[i] = a[i] + b[i];
}

/* ------------------------------------------------------------------------------------------ */
/* softmax cross-entropy head                                                                  */

void gt_head_forward(float *logits, const float *inp, const float *wte, size_t N, int C, int V) {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)N, V, C, 1.0f, inp, C, wte, C, 0.0f,
                logits, V);
}

void gt_head_backward_input(float *dinp, const float *dlogits, const float *wte, size_t N, int C,
                            int V) {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)N, C, V, 1.0f, dlogits, V, wte, C,
                0.0f, dinp, C);
}

void gt_head_backward_weight(float *dwte, const float *dlogits, const float *inp, size_t N, int C,
                             int V) {
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, V, C, (int)N, 1.0f, dlogits, V, inp, C,
                1.0f, dwte, C);
}

float gt_softmax_crossentropy_forward(float *probs_inout, float *losses, const int32_t *targets,
                                      size_t N, int V) {
#pragma omp parallel for schedule(static)
    for (size_t n = 0; n < N; n++) {
        float *row = probs_inout + n * V;
        float maxval = -INFINITY;
        for (int i = 0; i < V; i++)
            if (row[i] > maxval) maxval = row[i];
        /* loss from the log-sum-exp (accurate even when the target's probability is tiny) */
        float target_shifted = row[targets[n]] - maxval;
        double sum = 0.0;
        for (int i = 0; i < V; i++) {
            float e = expf(row[i] - maxval);
            row[i] = e;
            sum += e;
        }
        losses[n] = (float)(log(sum) - (double)target_shifted);
        float inv = (float)(1.0 / sum);
        for (int i = 0; i < V; i++) row[i] *= inv;
    }
    double total = 0.0;
    for (size_t n = 0; n < N; n++) total += losses[n];
    return (float)(total / (double)N);
}

void gt_softmax_crossentropy_backward(float *probs_inout, const int32_t *targets, size_t N, int V,
                                      float dloss) {
#pragma omp parallel for schedule(static)
    for (size_t n = 0; n < N; n++) {
        float *row = probs_inout + n * V;
        for (int i = 0; i < V; i++) row[i] *= dloss;
        row[targets[n]] -= dloss;
    }
}
