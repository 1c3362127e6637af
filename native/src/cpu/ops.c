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
/* exp that vectorizes (inside `omp simd` loops) without -ffast-math: Cody-Waite reduction to
 * r in [-ln2/2, ln2/2], Cephes' degree-6 polynomial, scale by 2^n through the exponent bits.
 * Relative error ~2 ulp; inputs are clamped to [-87.3, 88.3] (no inf/denormal results). */
#pragma omp declare simd notinbranch
static inline float gt_expf(float x) {
    x = x < -87.3f ? -87.3f : (x > 88.3f ? 88.3f : x);
    const float magic = 12582912.0f; /* 1.5 * 2^23: adding it rounds to an integer */
    float n = (x * 1.44269504088896341f + magic) - magic;
    float r = x - n * 0.693359375f;  /* ln2 split in a high part ... */
    r = r + n * 2.12194440e-4f;      /* ... and a low part */
    float p = 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    p = p * r * r + r + 1.0f;
    union {
        int32_t i;
        float f;
    } scale;
    scale.i = ((int32_t)n + 127) << 23;
    return p * scale.f;
}

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

/* Per head (b,h): Q, K, V are (T,hs) views into qkv with row stride 3C; the products go
 * through CBLAS (full T x T, the masked upper triangle is zeroed by the softmax). */
void gt_attention_forward(float *out, float *att, const float *qkv, int B, int T, int C, int NH) {
    int hs = C / NH;
    int C3 = 3 * C;
    float scale = 1.0f / sqrtf((float)hs);
    /* pre-softmax scores: att[b,h] (T,T) = scale * Q (T,hs) @ K^T (hs,T) */
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++) {
            const float *q = qkv + (size_t)b * T * C3 + (size_t)h * hs;
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, T, T, hs, scale, q, C3, q + C,
                        C3, 0.0f, att + ((size_t)b * NH + h) * T * T, T);
        }
    /* causal softmax of every row (b,h,t) over t2 <= t */
#pragma omp parallel for schedule(static)
    for (size_t row = 0; row < (size_t)B * NH * T; row++) {
        int t = (int)(row % (size_t)T);
        float *att_row = att + row * T; /* (T) */
        float maxval = -INFINITY;
        for (int t2 = 0; t2 <= t; t2++)
            if (att_row[t2] > maxval) maxval = att_row[t2];
#pragma omp simd
        for (int t2 = 0; t2 <= t; t2++) att_row[t2] = gt_expf(att_row[t2] - maxval);
        double sum = 0.0;
        for (int t2 = 0; t2 <= t; t2++) sum += att_row[t2];
        float inv = (float)(1.0 / sum);
        for (int t2 = 0; t2 <= t; t2++) att_row[t2] *= inv;
        for (int t2 = t + 1; t2 < T; t2++) att_row[t2] = 0.0f;
    }
    /* out[b, :, h] (T,hs) = att[b,h] (T,T) @ V (T,hs) */
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++) {
            const float *v = qkv + (size_t)b * T * C3 + 2 * (size_t)C + (size_t)h * hs;
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, T, hs, T, 1.0f,
                        att + ((size_t)b * NH + h) * T * T, T, v, C3, 0.0f,
                        out + (size_t)b * T * C + (size_t)h * hs, C);
        }
}

void gt_attention_backward(float *dqkv, const float *dout, const float *qkv, const float *att,
                           int B, int T, int C, int NH, float *scratch) {
    int hs = C / NH;
    int C3 = 3 * C;
    float scale = 1.0f / sqrtf((float)hs);
    float *datt = scratch; /* (T,T) for the current head */
    for (int b = 0; b < B; b++) {
        for (int h = 0; h < NH; h++) {
            const float *q = qkv + (size_t)b * T * C3 + (size_t)h * hs;
            const float *k = q + C, *v = q + 2 * (size_t)C;
            float *dq = dqkv + (size_t)b * T * C3 + (size_t)h * hs;
            float *dk = dq + C, *dv = dq + 2 * (size_t)C;
            const float *a = att + ((size_t)b * NH + h) * T * T; /* (T,T) */
            const float *dy = dout + (size_t)b * T * C + (size_t)h * hs; /* (T,hs), stride C */
            /* datt (T,T) = dy @ V^T;  dV (T,hs) = att^T @ dy */
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, T, T, hs, 1.0f, dy, C, v, C3,
                        0.0f, datt, T);
            cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, T, hs, T, 1.0f, a, T, dy, C,
                        0.0f, dv, C3);
            /* softmax backward per row, times the score scale: dpre = att * (datt - <att,datt>) */
#pragma omp parallel for schedule(static)
            for (int t = 0; t < T; t++) {
                const float *a_row = a + (size_t)t * T;
                float *d_row = datt + (size_t)t * T;
                double dot = 0.0;
                for (int t2 = 0; t2 <= t; t2++) dot += (double)a_row[t2] * d_row[t2];
                float ds = (float)dot;
                for (int t2 = 0; t2 <= t; t2++) d_row[t2] = a_row[t2] * (d_row[t2] - ds) * scale;
                for (int t2 = t + 1; t2 < T; t2++) d_row[t2] = 0.0f;
            }
            /* dQ (T,hs) = dpre @ K;  dK (T,hs) = dpre^T @ Q */
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, T, hs, T, 1.0f, datt, T, k, C3,
                        0.0f, dq, C3);
            cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, T, hs, T, 1.0f, datt, T, q, C3,
                        0.0f, dk, C3);
        }
    }
}

/* ------------------------------------------------------------------------------------------ */
/* GELU (tanh approximation) and residual                                                      */

#define GT_GELU_SCALE 0.7978845608028654f /* sqrt(2/pi) */

/* gelu(x) = 0.5 x (1 + tanh(u)) = x * sigmoid(2u), u = sqrt(2/pi) (x + 0.044715 x^3):
 * the sigmoid form has no cancellation for very negative x and needs only exp. */
void gt_gelu_forward(float *out, const float *inp, size_t n) {
#pragma omp parallel for simd schedule(static)
    for (size_t i = 0; i < n; i++) {
        float x = inp[i];
        float u = GT_GELU_SCALE * (x + 0.044715f * x * x * x);
        out[i] = x / (1.0f + gt_expf(-2.0f * u));
    }
}

/* d gelu / dx = s + 2 x s (1 - s) u'(x), s = sigmoid(2u), u' = sqrt(2/pi) (1 + 3*0.044715 x^2)
 * (equal to 0.5 (1 + tanh u) + 0.5 x sech^2(u) u') */
void gt_gelu_backward(float *dinp, const float *inp, const float *dout, size_t n) {
#pragma omp parallel for simd schedule(static)
    for (size_t i = 0; i < n; i++) {
        float x = inp[i];
        float u = GT_GELU_SCALE * (x + 0.044715f * x * x * x);
        float sig = 1.0f / (1.0f + gt_expf(-2.0f * u));
        float du = GT_GELU_SCALE * (1.0f + 3.0f * 0.044715f * x * x);
        dinp[i] = (sig + 2.0f * x * sig * (1.0f - sig) * du) * dout[i];
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
#pragma omp simd
        for (int i = 0; i < V; i++) row[i] = gt_expf(row[i] - maxval);
        double sum = 0.0;
        for (int i = 0; i < V; i++) sum += row[i];
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
