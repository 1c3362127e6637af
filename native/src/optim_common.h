/*
 * optim_common.h — the optimizer's scalar math shared by the CPU (optim.c) and CUDA
 * (cuda/stage_cuda.c) builds: AdamW's per-step scalars, plus gt_clip_coef and gt_lr_at of
 * stage.h (defined in optim_common.c). Not part of the public API.
 */
#ifndef GANTRY_OPTIM_COMMON_H
#define GANTRY_OPTIM_COMMON_H

/* AdamW's per-step scalars, as torch.optim.AdamW's single-tensor path forms them: bias
 * corrections in double (Python floats), applied as fp32 scalars. */
typedef struct {
    float step_size;       /* lr / (1 - beta1^t) */
    float bc2_sqrt;        /* sqrt(1 - beta2^t) */
    float one_minus_beta1; /* 1 - beta1 (the lerp weight of the first moment) */
    float one_minus_beta2; /* 1 - beta2 */
} gt_adamw_scalars;

/* The scalars of step step_t (>= 1). */
gt_adamw_scalars gt_adamw_scalars_at(float lr, float beta1, float beta2, int step_t);

#endif /* GANTRY_OPTIM_COMMON_H */
