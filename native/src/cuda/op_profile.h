/*
 * op_profile.h — optional per-operation GPU timing of the CUDA stage (GANTRY_PROFILE_OPS=1).
 *
 * The stage marks the start of each operation on its stream (gt_prof_mark); an operation's time
 * is the CUDA-event interval to the next mark on the same stream, so the marks cost nothing on
 * the GPU and the numbers are device time, not launch time. Intervals are resolved whenever the
 * stream is synchronized and summed per operation; gt_prof_report prints one line
 * `gantry-op-profile {json}` to stderr. The first optimizer step's marks close a warm-up: the
 * totals restart there, so the report covers the steps after the first (which builds plans and
 * autotunes every matrix-product shape). Off (every call returns at once) unless the variable is
 * set when the stage is created. Not part of the public API.
 *
 * GANTRY_PROFILE_OPS=prefill also starts every action with a GPU-side delay (gt_cu_spin, 20 ms)
 * so the host queues the whole action before the GPU starts it: the intervals are then the
 * kernels' own times. The difference to a plain profile is the time the GPU waited for the host.
 */
#ifndef GANTRY_CUDA_OP_PROFILE_H
#define GANTRY_CUDA_OP_PROFILE_H

#include <cuda_runtime_api.h>

typedef enum {
    GT_P_INPUT, GT_P_ENCODER, GT_P_LN, GT_P_QKV, GT_P_ATTN, GT_P_ATTPROJ, GT_P_FC, GT_P_FCPROJ,
    GT_P_HEAD, GT_P_CE, GT_P_OUTPUT,
    GT_P_D_FCPROJ, GT_P_D_FC, GT_P_D_LN, GT_P_D_ATTPROJ, GT_P_D_ATTN, GT_P_D_QKV, GT_P_D_HEAD,
    GT_P_D_CE, GT_P_W_FCPROJ, GT_P_W_FC, GT_P_W_ATTPROJ, GT_P_W_QKV, GT_P_W_HEAD,
    GT_P_W_ENCODER, GT_P_ADAMW, GT_P_END, GT_P_COUNT
} gt_prof_op;

typedef struct {
    int enabled;
    int prefill;         /* GANTRY_PROFILE_OPS=prefill */
    cudaEvent_t *events; /* pool */
    int *ops;            /* op of each pending mark */
    int n, cap;          /* pending marks, pool size */
    double ms[GT_P_COUNT];
    long count[GT_P_COUNT];
    int steps;           /* optimizer steps seen; totals restart after the first */
} gt_prof;

/* Starts off, on (mode 1) or on with prefill (mode 2): GANTRY_PROFILE_OPS as GT_PROFILE_*
 * of runtime_config.h. */
void gt_prof_init(gt_prof *p, int mode);
/* prefill mode: queues the GPU-side delay on `stream` (call at the start of an action). */
void gt_prof_prefill(gt_prof *p, cudaStream_t stream);
/* Marks the start of `op` on `stream` (GT_P_END closes the last one). */
void gt_prof_mark(gt_prof *p, gt_prof_op op, cudaStream_t stream);
/* Adds the intervals of the marks so far (their stream must be idle) and restarts. */
void gt_prof_flush(gt_prof *p);
/* Prints the totals, labelled with `label`. */
void gt_prof_report(const gt_prof *p, const char *label);
void gt_prof_release(gt_prof *p);

#ifdef __cplusplus
extern "C"
#endif
    cudaError_t
    gt_cu_spin(unsigned long long ns, cudaStream_t stream); /* spin.cu */

#endif /* GANTRY_CUDA_OP_PROFILE_H */
