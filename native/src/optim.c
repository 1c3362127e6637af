/*
 * optim.c — gradient zeroing, the gradient sum of squares for global-norm clipping, AdamW
 * (matching torch.optim.AdamW's single-tensor path) and the learning-rate schedule.
 */
#include <math.h>
#include <string.h>

#include "common.h"
#include "stage_internal.h"

int gt_stage_zero_grad(gt_stage *s) {
    int rc = GT_OK;
    if (s == NULL) GT_INPUT_FAIL("gt_stage_zero_grad: stage is NULL");
    memset(s->buffers[GT_BUF_GRADS], 0, s->layout.num_params * sizeof(float));
cleanup:
    return rc;
}

/* Sum of squares of grads[begin, end) in double, in index order (deterministic). */
static double sq_sum(const float *g, size_t begin, size_t end) {
    double sum = 0.0;
    for (size_t i = begin; i < end; i++) sum += (double)g[i] * g[i];
    return sum;
}

int gt_stage_grad_sq_sum(const gt_stage *s, int include_wte, double *out) {
    int rc = GT_OK;
    if (s == NULL || out == NULL) GT_INPUT_FAIL("gt_stage_grad_sq_sum: stage or out is NULL");
    const float *G = s->buffers[GT_BUF_GRADS];
    double total = 0.0;
    /* per tensor, in table order: the wte range is tensor 0 when present */
    for (int i = 0; i < s->layout.num_tensors; i++) {
        const gt_tensor_info *t = &s->layout.tensors[i];
        if (i == 0 && s->layout.has_wte && !include_wte) continue;
        total += sq_sum(G, t->offset, t->offset + t->numel);
    }
    *out = total;
cleanup:
    return rc;
}

int gt_stage_adamw_step(gt_stage *s, float lr, float beta1, float beta2, float eps,
                        float weight_decay, int step_t, float grad_scale) {
    int rc = GT_OK;
    if (s == NULL) GT_INPUT_FAIL("gt_stage_adamw_step: stage is NULL");
    if (step_t < 1) GT_INPUT_FAIL("gt_stage_adamw_step: step_t=%d (must be >= 1)", step_t);
    float *P = s->buffers[GT_BUF_PARAMS], *G = s->buffers[GT_BUF_GRADS];
    float *M = s->buffers[GT_BUF_ADAM_M], *Vb = s->buffers[GT_BUF_ADAM_V];
    /* as torch: bias corrections in double (Python floats), applied as fp32 scalars */
    double bias_correction1 = 1.0 - pow((double)beta1, step_t);
    double bias_correction2 = 1.0 - pow((double)beta2, step_t);
    float step_size = (float)((double)lr / bias_correction1);
    float bc2_sqrt = (float)sqrt(bias_correction2);
    float one_minus_beta1 = (float)(1.0 - (double)beta1);
    float one_minus_beta2 = (float)(1.0 - (double)beta2);
    for (int ti = 0; ti < s->layout.num_tensors; ti++) {
        const gt_tensor_info *t = &s->layout.tensors[ti];
        float decay_factor = t->decay ? (float)(1.0 - (double)lr * weight_decay) : 1.0f;
        size_t begin = t->offset, end = t->offset + t->numel;
#pragma omp parallel for schedule(static)
        for (size_t i = begin; i < end; i++) {
            float g = G[i] * grad_scale;
            float p = P[i] * decay_factor;
            /* torch.lerp(m, g, w): w < 0.5 -> m + w * (g - m) */
            float m = M[i] + one_minus_beta1 * (g - M[i]);
            float v = Vb[i] * beta2 + one_minus_beta2 * g * g;
            float denom = sqrtf(v) / bc2_sqrt + eps;
            P[i] = p - step_size * (m / denom);
            M[i] = m;
            Vb[i] = v;
        }
    }
cleanup:
    return rc;
}

float gt_clip_coef(double total_norm, double max_norm) {
    double coef = max_norm / (total_norm + 1e-6);
    return (float)(coef < 1.0 ? coef : 1.0);
}

double gt_lr_at(gt_lr_kind kind, int step, double max_lr, double min_lr, int warmup_steps,
                int total_steps) {
    if (step < warmup_steps) return max_lr * (double)(step + 1) / (double)warmup_steps;
    if (kind == GT_LR_CONSTANT) return max_lr;
    int decay_steps = total_steps - warmup_steps;
    double ratio = decay_steps > 0 ? (double)(step - warmup_steps) / (double)decay_steps : 1.0;
    if (ratio < 0.0) ratio = 0.0;
    if (ratio > 1.0) ratio = 1.0;
    double coeff = 0.5 * (1.0 + cos(M_PI * ratio));
    return min_lr + coeff * (max_lr - min_lr);
}
