/*
 * optim_common.c — backend-independent optimizer math (optim_common.h): AdamW's per-step
 * scalars, the global-norm clip coefficient and the learning-rate schedule of stage.h.
 */
#include "optim_common.h"

#include <math.h>

#include "gantry/stage.h"

gt_adamw_scalars gt_adamw_scalars_at(float lr, float beta1, float beta2, int step_t) {
    double bias_correction1 = 1.0 - pow((double)beta1, step_t);
    double bias_correction2 = 1.0 - pow((double)beta2, step_t);
    gt_adamw_scalars k;
    k.step_size = (float)((double)lr / bias_correction1);
    k.bc2_sqrt = (float)sqrt(bias_correction2);
    k.one_minus_beta1 = (float)(1.0 - (double)beta1);
    k.one_minus_beta2 = (float)(1.0 - (double)beta2);
    return k;
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
