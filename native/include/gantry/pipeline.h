/*
 * gantry/pipeline.h — the pipeline executor: one optimizer step of pipeline x data parallel
 * training, driven by a schedule table generated (and proven) on the Python side.
 *
 * A rank owns v stage objects (chunks): global stage s = chunk * pp + pipe_rank. The table is
 * int32 rows (op, stage, micro_batch, slot, peer) — see launcher/schedules/table.py — and the
 * executor follows it verbatim: it takes no decision at run time.
 *
 * One step: run the table (forward / backward / split backward on activation slots,
 * non-blocking sends and receives waited where the table says; each chunk's gradients are
 * zeroed right before its first action that writes them, so the first rank's first forward,
 * which every other rank waits for, does not wait for a memset); hierarchical
 * data-parallel all-reduce of all gradients; all-reduce of the wte gradient between first and
 * last stage (of the dp-reduced gradients); global gradient norm (pipeline all-reduce of sums
 * of squares, wte once); clipping; AdamW at the scheduled learning rate. The loss (mean over
 * the micro-batches and replicas) and per-category timings come back on every rank.
 *
 * Data-parallel overlap (dp > 1, GANTRY_DP_OVERLAP=1, the default): the table's LAST
 * gradient-producing action of each chunk (its last BACKWARD or WEIGHT) runs with the stage's
 * gradients-ready hook armed (stage.h); the ranges it reports are coalesced into buckets of
 * about GANTRY_DP_BUCKET_MB (default 25) and each bucket's all-reduce starts at once
 * (comm.h gt_comm_dp_bucket_start), overlapping the rest of the backward and the table; the
 * step waits for all buckets before the tied all-reduce. GANTRY_DP_OVERLAP=0 all-reduces each
 * whole gradient buffer after the table instead. Both give the same sums (for dp = 2 the same
 * bits: see comm.h).
 *
 * Optimizer overlap (dp = 1, clipping off; GANTRY_OPT_OVERLAP): with no global norm to wait
 * for, the same armed action updates each reported range with AdamW at once
 * (gt_stage_adamw_range: on the CUDA backend a stream of its own, overlapping the rest of the
 * backward); the tied wte copies of the first and last stage are updated after their
 * all-reduce. 2 (the default) does so on pipeline rank 0 only: every other rank updates after
 * its table, which (below) runs into the wait for its next step's first input — idle time on
 * the device otherwise — instead of competing with its compute; 1 on every rank; 0 on none.
 * Same bits either way (AdamW is element-wise). The step's loss and norm are all-reduced before
 * any update, so no rank waits for another's optimizer.
 *
 * The step returns once the update is enqueued: each stage's stream waits for its optimizer on
 * the device, the host does not (stage reads and saves synchronize the stream first). So the
 * update of a rank whose table starts with a receive overlaps that wait, and on a rank whose
 * table starts with compute the first action's time includes what is left of it.
 */
#ifndef GANTRY_PIPELINE_H
#define GANTRY_PIPELINE_H

#include <stdint.h>

#include "gantry/stage.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Action codes (launcher/schedules/table.py Op). */
enum {
    GT_OP_FORWARD = 1, GT_OP_BACKWARD = 2, GT_OP_BACKWARD_INPUT = 3, GT_OP_WEIGHT = 4,
    GT_OP_SEND_ACT = 5, GT_OP_RECV_ACT = 6, GT_OP_SEND_GRAD = 7, GT_OP_RECV_GRAD = 8,
    GT_OP_WAIT = 9
};
#define GT_ACTION_WIDTH 5

typedef struct gt_comm gt_comm; /* native/src/comm.h */
typedef struct gt_pipeline gt_pipeline;

/* Optimizer settings of one step. */
typedef struct {
    int step;            /* 0-based step index (AdamW's t = step + 1) */
    int total_steps;     /* for the cosine schedule */
    int lr_kind;         /* gt_lr_kind */
    int warmup_steps;
    double max_lr, min_lr;
    float beta1, beta2, eps, weight_decay;
    float grad_clip;     /* max global norm; 0 disables clipping */
} gt_step_args;

/* What one step did. Times are seconds on this rank. */
typedef struct {
    double loss;      /* mean loss over micro-batches and replicas (same on every rank) */
    double grad_norm; /* global norm before clipping */
    double lr;        /* learning rate used */
    double compute_s; /* forward / backward / weight-gradient compute */
    double send_s;    /* posting and completing sends */
    double recv_s;    /* posting receives and completing those whose data had arrived */
    double bubble_s;  /* blocked in a receive whose data had not arrived (pipeline bubble) */
    double sync_s;    /* after the table: data-parallel and tied all-reduces, norm, the update
                         (enqueued: it may still run when the step returns) */
    double total_s;
    double dp_wait_s; /* part of sync_s: waiting for the overlapped buckets (MPI: blocked until
                         they are summed; NCCL: enqueueing the compute stream's wait) */
    int32_t dp_buckets; /* buckets all-reduced overlapped with the backward (0: none) */
    int32_t opt_ranges; /* parameter ranges AdamW updated during the backward (0: none) */
    double tied_s;      /* part of sync_s: the tied wte all-reduce, waiting for the other rank
                           of the pair to reach it included (after dp_wait_s) */
    double norm_s;      /* part of sync_s: the gradients' sum of squares and the norm and loss
                           all-reduces; the rest of sync_s enqueues the update */
} gt_step_result;

/* One span of the last step's trace (times in seconds since the step started). */
typedef struct {
    int32_t op, stage, micro_batch, pad;
    double t0, t1;
} gt_trace_event;

/* stage_layers: [2 * pp * v] (layer_begin, layer_end) of every global stage;
 * slots_per_stage: [pp * v]. Stages this rank does not own are ignored. */
GT_API int gt_pipeline_create(const gt_config *cfg, gt_comm *comm, int v, int micro_batches,
                              int B, int T, const int32_t *stage_layers,
                              const int32_t *slots_per_stage, gt_pipeline **out);
GT_API void gt_pipeline_free(gt_pipeline *p);
GT_API int gt_pipeline_num_chunks(const gt_pipeline *p);
GT_API gt_stage *gt_pipeline_chunk(gt_pipeline *p, int chunk); /* NULL if out of range */

/* Runs one step. actions: [n_actions, 5] rows of this rank's table. tokens / targets: this
 * replica's (m, B, T) int32 inputs and targets (read on the first / last stage only). */
GT_API int gt_pipeline_step(gt_pipeline *p, const int32_t *actions, int n_actions,
                            const int32_t *tokens, const int32_t *targets,
                            const gt_step_args *args, gt_step_result *result);

/* Name of the site this library was built for by `gantry build` ("" for a plain build). */
GT_API const char *gt_build_site(void);

/* The last step's spans (valid until the next step). */
GT_API int gt_pipeline_trace(const gt_pipeline *p, const gt_trace_event **events, int *count);

#ifdef __cplusplus
}
#endif

#endif /* GANTRY_PIPELINE_H */
