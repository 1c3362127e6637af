/*
 * optim_cpu.c — the CPU build's gradient zeroing, gradient sum of squares for global-norm clipping
 * (separate, or captured from the AdamW ranges) and AdamW (matching torch.optim.AdamW's
 * single-tensor path). The scalar math both builds share
 * (AdamW's per-step scalars, clip coefficient, learning-rate schedule) is in optim_common.c.
 */
#include <math.h>
#include <string.h>

#include "common.h"
#include "cpu/stage_cpu.h"
#include "optim_common.h"
#include "stage_checks.h"

int gt_stage_zero_grad(gt_stage *s) {
    int rc = GT_OK;
    if (s == NULL) GT_INPUT_FAIL("gt_stage_zero_grad: stage is NULL");
    memset(s->buffers[GT_BUF_GRADS], 0, s->layout.num_params * sizeof(float));
cleanup:
    return rc;
}

int gt_stage_start_accumulation(gt_stage *s) { return gt_stage_zero_grad(s); }

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

/* AdamW of elements [begin, end), tensor by tensor (each with its decay flag). */
static void adamw_elements(gt_stage *s, size_t begin, size_t end, float lr, float beta1,
                           float beta2, float eps, float weight_decay, int step_t,
                           float grad_scale) {
    float *P = s->buffers[GT_BUF_PARAMS], *G = s->buffers[GT_BUF_GRADS];
    float *M = s->buffers[GT_BUF_ADAM_M], *Vb = s->buffers[GT_BUF_ADAM_V];
    const gt_adamw_scalars k = gt_adamw_scalars_at(lr, beta1, beta2, step_t);
    const float step_size = k.step_size, bc2_sqrt = k.bc2_sqrt;
    const float one_minus_beta1 = k.one_minus_beta1, one_minus_beta2 = k.one_minus_beta2;
    for (int ti = 0; ti < s->layout.num_tensors; ti++) {
        const gt_tensor_info *t = &s->layout.tensors[ti];
        float decay_factor = t->decay ? (float)(1.0 - (double)lr * weight_decay) : 1.0f;
        size_t lo = t->offset > begin ? t->offset : begin;
        size_t hi = t->offset + t->numel < end ? t->offset + t->numel : end;
#pragma omp parallel for schedule(static)
        for (size_t i = lo; i < hi; i++) {
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
}

int gt_stage_adamw_step(gt_stage *s, float lr, float beta1, float beta2, float eps,
                        float weight_decay, int step_t, float grad_scale) {
    int rc = GT_OK;
    if (s == NULL) GT_INPUT_FAIL("gt_stage_adamw_step: stage is NULL");
    if (step_t < 1) GT_INPUT_FAIL("gt_stage_adamw_step: step_t=%d (must be >= 1)", step_t);
    adamw_elements(s, 0, s->layout.num_params, lr, beta1, beta2, eps, weight_decay, step_t,
                   grad_scale);
cleanup:
    return rc;
}

int gt_stage_adamw_range(gt_stage *s, size_t offset, size_t count, float lr, float beta1,
                         float beta2, float eps, float weight_decay, int step_t,
                         float grad_scale) {
    int rc = GT_OK;
    GT_CHECK(gt_stage_check_adamw_range(gt_stage_layout_of(s), offset, count, step_t));
    if (s->layout.norm_capture) s->norm_sq += sq_sum(s->buffers[GT_BUF_GRADS], offset, offset + count);
    adamw_elements(s, offset, offset + count, lr, beta1, beta2, eps, weight_decay, step_t,
                   grad_scale);
cleanup:
    return rc;
}

int gt_stage_norm_capture_begin(gt_stage *s) {
    int rc = GT_OK;
    GT_CHECK(gt_stage_norm_capture_start(s == NULL ? NULL : &s->layout));
    s->norm_sq = 0.0;
cleanup:
    return rc;
}

int gt_stage_norm_capture_end(gt_stage *s, double *sq) {
    int rc = GT_OK;
    GT_CHECK(gt_stage_norm_capture_stop(s == NULL ? NULL : &s->layout, sq));
    *sq = s->norm_sq;
cleanup:
    return rc;
}

int gt_stage_join_optimizer(gt_stage *s) {
    int rc = GT_OK;
    if (s == NULL) GT_INPUT_FAIL("gt_stage_join_optimizer: stage is NULL");
cleanup:
    return rc; /* the CPU backend's ranges ran when they were called */
}
