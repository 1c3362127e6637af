/*
 * pipeline.c — the schedule-table executor of gantry/pipeline.h (see there for one step).
 *
 * Backend-neutral: the same file runs the CPU build (host fp32 activations, MPI) and the CUDA
 * build (device bf16 activations, NCCL on dedicated streams). Buffers per owned chunk and
 * activation slot, each one (B,T,C) activation of the backend (gt_stage_alloc_activation):
 *   x_in   received input activations (non-first stages)
 *   x_out  output activations, the source of SEND_ACT until its slot is reused
 *   dx_out received gradient of x_out (non-last stages)
 *   dx_in  gradient of x_in, the source of SEND_GRAD until its slot is reused
 *
 * Timing: the stages compute on the communicator's compute stream and every compute action
 * ends with a stream synchronize (a no-op on the CPU), so the host clock around an action is
 * the GPU's time for it (the first compute action of a step also waits for what is left of the
 * previous step's update: the step returns without waiting for it, see gantry/pipeline.h);
 * sends and receives run on their own streams meanwhile, and a WAIT
 * blocks the host until its transfer is done. So the per-category times (compute / send /
 * recv / bubble) and the trace spans are what the GPU did, not launch times.
 *
 * Data-parallel overlap (see gantry/pipeline.h): before each step the executor finds, per
 * chunk, the table index of its last BACKWARD / WEIGHT (last_grad); that action alone runs
 * with the gradients-ready hook armed, feeding the bucketer (dp_buckets.h), whose full buckets
 * start their all-reduce at once. The hook sees the final gradients because no later action of
 * the step touches that chunk's gradient buffer.
 *
 * Gradient norm: where the hook runs AdamW per range (opt_now), the stage captures the sum of
 * squares from those ranges (gt_stage_norm_capture_*; GANTRY_NORM_CAPTURE=0: not), so the norm
 * needs no pass of its own over the gradients; the other chunks sum their squares after the
 * table.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "comm.h"
#include "common.h"
#include "dp_buckets.h"
#include "gantry/pipeline.h"
#include "runtime_config.h"
#ifdef GANTRY_HAVE_SITE_H
#include "gantry_site.h"
#endif
#ifndef GANTRY_SITE_NAME
#define GANTRY_SITE_NAME ""
#endif

const char *gt_build_site(void) { return GANTRY_SITE_NAME; }

typedef struct {
    gt_stage *stage;
    int global_stage, is_first, is_last, n_slots;
    size_t act_bytes; /* one (B,T,C) activation of the backend */
    float **x_in, **x_out, **dx_out, **dx_in; /* [n_slots] each; backend buffers */
} gt_chunk;

struct gt_pipeline {
    gt_config cfg;
    gt_comm *comm;
    int pp, dp, v, pipe_rank, m, B, T;
    gt_chunk *chunks; /* [v] */
    gt_trace_event *trace;
    int trace_count, trace_cap;
    int overlap;            /* dp > 1 and GANTRY_DP_OVERLAP=1 */
    size_t bucket_elems;    /* GANTRY_DP_BUCKET_MB in floats */
    int *last_grad;         /* [v] table index of each chunk's last BACKWARD / WEIGHT, -1 */
    int *first_grad;        /* [v] table index of each chunk's first action writing gradients
                               (BACKWARD / BACKWARD_INPUT / WEIGHT), -1: none */
    gt_bucketer bucketer;   /* of the armed action */
    float *armed_grads;     /* gradient buffer of the armed action's chunk */
    int dp_buckets;         /* buckets started this step */
    int opt_overlap;        /* GANTRY_OPT_OVERLAP: 0 none, 1 every rank, 2 rank 0 (default),
                               3 rank 0 and, on the others, all chunks but the last finished */
    int opt_now;            /* this step: AdamW per range from the hook (no clipping, dp 1) */
    int norm_capture;       /* GANTRY_NORM_CAPTURE: such chunks' norm from their AdamW ranges */
    int opt_ranges;         /* ranges updated so this step */
    gt_chunk *armed_chunk;  /* chunk of the armed action */
    gt_step_args step_args; /* this step's optimizer settings, for the hook */
    double lr_now;          /* this step's learning rate */
};

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

int gt_pipeline_create(const gt_config *cfg, gt_comm *comm, int v, int m, int B, int T,
                       const int32_t *stage_layers, const int32_t *slots_per_stage,
                       gt_pipeline **out) {
    int rc = GT_OK;
    gt_pipeline *p = NULL;
    *out = NULL;
    if (v < 1 || m < 1 || B < 1 || T < 1)
        GT_FAIL(GT_EINPUT, "bad pipeline shape v=%d m=%d B=%d T=%d", v, m, B, T);
    GT_CALLOC(p, 1);
    p->cfg = *cfg;
    p->comm = comm;
    p->pp = gt_comm_pp(comm), p->dp = gt_comm_dp(comm), p->pipe_rank = gt_comm_pipe_rank(comm);
    p->v = v, p->m = m, p->B = B, p->T = T;
    {
        gt_runtime_config rc_env;
        GT_CHECK(gt_runtime_config_read(&rc_env));
        p->overlap = rc_env.dp_overlap;
        p->bucket_elems = gt_runtime_dp_bucket_elements(&rc_env);
        /* AdamW per gradient range as soon as it is final when clipping is off: 1 on every
         * rank, 2 on pipeline rank 0 only (the others update after the table, into the next
         * step's fill), 3 as 2 plus, on the other ranks, every chunk but the one whose
         * gradients are final last (its update alone goes into the fill) */
        p->opt_overlap = rc_env.opt_overlap;
        p->norm_capture = rc_env.norm_capture;
    }
    p->overlap = p->overlap && p->dp > 1;
    GT_CALLOC(p->last_grad, v);
    GT_CALLOC(p->first_grad, v);
    GT_CALLOC(p->chunks, v);
    const int n_stages = p->pp * v;
    void *stream = gt_comm_compute_stream(comm);
    for (int c = 0; c < v; c++) {
        gt_chunk *ch = &p->chunks[c];
        int s = c * p->pp + p->pipe_rank;
        ch->global_stage = s;
        ch->is_first = s == 0;
        ch->is_last = s == n_stages - 1;
        ch->n_slots = slots_per_stage[s];
        if (ch->n_slots < 1) GT_FAIL(GT_EINPUT, "stage %d has %d slots", s, ch->n_slots);
        GT_CHECK(gt_stage_create(cfg, stage_layers[2 * s], stage_layers[2 * s + 1], ch->is_first,
                                 ch->is_last, B, T, ch->n_slots, &ch->stage));
        if (stream != NULL) GT_CHECK(gt_stage_set_stream(ch->stage, stream));
        ch->act_bytes = gt_stage_activation_bytes(ch->stage);
        GT_CALLOC(ch->x_in, 4 * (size_t)ch->n_slots);
        ch->x_out = ch->x_in + ch->n_slots;
        ch->dx_out = ch->x_out + ch->n_slots;
        ch->dx_in = ch->dx_out + ch->n_slots;
        for (int k = 0; k < 4 * ch->n_slots; k++) {
            void *buf = NULL;
            GT_CHECK(gt_stage_alloc_activation(ch->stage, &buf));
            ch->x_in[k] = buf;
        }
    }
    if (p->pp > 1) { /* collective: every rank creates its pipeline */
        size_t max_bytes = 0;
        for (int c = 0; c < v; c++)
            if (p->chunks[c].act_bytes > max_bytes) max_bytes = p->chunks[c].act_bytes;
        GT_CHECK(gt_comm_p2p_setup(comm, max_bytes));
    }
    *out = p;
    p = NULL;
cleanup:
    gt_pipeline_free(p);
    return rc;
}

void gt_pipeline_free(gt_pipeline *p) {
    if (p == NULL) return;
    for (int c = 0; p->chunks != NULL && c < p->v; c++) {
        gt_chunk *ch = &p->chunks[c];
        for (int k = 0; ch->x_in != NULL && k < 4 * ch->n_slots; k++)
            gt_stage_free_activation(ch->stage, ch->x_in[k]);
        gt_stage_free(ch->stage);
        free(ch->x_in);
    }
    free(p->chunks);
    free(p->last_grad);
    free(p->first_grad);
    free(p->trace);
    free(p);
}

int gt_pipeline_num_chunks(const gt_pipeline *p) { return p->v; }

gt_stage *gt_pipeline_chunk(gt_pipeline *p, int chunk) {
    return chunk >= 0 && chunk < p->v ? p->chunks[chunk].stage : NULL;
}

int gt_pipeline_trace(const gt_pipeline *p, const gt_trace_event **events, int *count) {
    *events = p->trace;
    *count = p->trace_count;
    return GT_OK;
}

/* The chunk of global stage s on this rank, or fail. */
static int chunk_of(gt_pipeline *p, int s, gt_chunk **out) {
    int rc = GT_OK;
    if (s < 0 || s >= p->pp * p->v || s % p->pp != p->pipe_rank)
        GT_FAIL(GT_ESTATE, "schedule names stage %d, not owned by pipeline rank %d", s,
                p->pipe_rank);
    *out = &p->chunks[s / p->pp];
cleanup:
    return rc;
}

/* 1 and the chunk's wte range if it holds a tied copy of wte (first xor last stage: the
 * copies are summed across the pair after the table). */
static int tied_wte(const gt_chunk *ch, size_t *offset, size_t *count) {
    return ch->is_first != ch->is_last && gt_stage_wte_range(ch->stage, offset, count);
}

/* AdamW of parameters [offset, offset + count) of a chunk with this step's settings. */
static int update_range(gt_pipeline *p, gt_chunk *ch, size_t offset, size_t count,
                        float grad_scale) {
    const gt_step_args *a = &p->step_args;
    return gt_stage_adamw_range(ch->stage, offset, count, (float)p->lr_now, a->beta1, a->beta2,
                                a->eps, a->weight_decay, a->step + 1, grad_scale);
}

/* Bucketer flush: starts the data-parallel all-reduce of one bucket of the armed chunk. */
static int start_bucket(void *ctx, size_t offset, size_t count) {
    gt_pipeline *p = ctx;
    p->dp_buckets++;
    return gt_comm_dp_bucket_start(p->comm, p->armed_grads + offset, count);
}

/* The stage's gradients-ready hook while armed: one more final range for the bucketer. */
static int on_grad_ready(void *ctx, size_t offset, size_t count) {
    return gt_bucketer_add((gt_bucketer *)ctx, offset, count);
}

/* The gradients-ready hook while armed for the optimizer: AdamW of the range at once, but for
 * the wte copy of a chunk that shares it with another rank (first xor last stage): that one is
 * summed across the pair after the table and updated then. */
static int on_grad_ready_optim(void *ctx, size_t offset, size_t count) {
    int rc = GT_OK;
    gt_pipeline *p = ctx;
    gt_chunk *ch = p->armed_chunk;
    size_t w_off = 0, w_count = 0, end = offset + count;
    size_t pieces[2][2] = {{offset, end}, {end, end}};
    if (tied_wte(ch, &w_off, &w_count) && w_off < end && offset < w_off + w_count) {
        pieces[0][1] = w_off > offset ? w_off : offset; /* cut the wte range out */
        pieces[1][0] = w_off + w_count < end ? w_off + w_count : end;
    }
    for (int k = 0; k < 2; k++) {
        if (pieces[k][1] <= pieces[k][0]) continue;
        GT_CHECK(update_range(p, ch, pieces[k][0], pieces[k][1] - pieces[k][0], 1.0f));
        p->opt_ranges++;
    }
cleanup:
    return rc;
}

/* Finds each chunk's first action that writes gradients and its last gradient-producing
 * BACKWARD / WEIGHT (-1: none; last_grad also -1 when there is nothing to arm). */
static void find_grad_actions(gt_pipeline *p, const int32_t *actions, int n) {
    const int arm = p->overlap || p->opt_now;
    for (int c = 0; c < p->v; c++) p->last_grad[c] = p->first_grad[c] = -1;
    for (int i = 0; i < n; i++) {
        const int32_t *a = actions + (size_t)i * GT_ACTION_WIDTH;
        int op = a[0], s = a[1];
        if (s < 0 || s >= p->pp * p->v || s % p->pp != p->pipe_rank) continue;
        if (op != GT_OP_BACKWARD && op != GT_OP_BACKWARD_INPUT && op != GT_OP_WEIGHT) continue;
        if (p->first_grad[s / p->pp] < 0) p->first_grad[s / p->pp] = i;
        if (arm && op != GT_OP_BACKWARD_INPUT) p->last_grad[s / p->pp] = i;
    }
    if (p->opt_now && p->opt_overlap == 3 && p->pipe_rank != 0) {
        int latest = 0; /* the chunk finished last: updated after the table, into the fill */
        for (int c = 1; c < p->v; c++)
            if (p->last_grad[c] > p->last_grad[latest]) latest = c;
        p->last_grad[latest] = -1;
    }
}

/* A BACKWARD or WEIGHT action; `armed`: the chunk's last one, run with the gradients-ready
 * hook, after which every range must have been reported (and its bucket started, or its
 * AdamW enqueued). */
static int grad_action(gt_pipeline *p, gt_chunk *ch, int op, int slot, float loss_scale,
                       int armed) {
    int rc = GT_OK;
    if (armed && p->overlap) {
        gt_bucketer_reset(&p->bucketer, gt_stage_num_params(ch->stage), p->bucket_elems,
                          start_bucket, p);
        p->armed_grads = gt_stage_buffer(ch->stage, GT_BUF_GRADS);
        GT_CHECK(gt_stage_set_grad_ready(ch->stage, on_grad_ready, &p->bucketer));
    } else if (armed) {
        p->armed_chunk = ch;
        GT_CHECK(gt_stage_set_grad_ready(ch->stage, on_grad_ready_optim, p));
    }
    if (op == GT_OP_BACKWARD)
        GT_CHECK(gt_stage_backward(ch->stage, slot, ch->is_last ? NULL : ch->dx_out[slot],
                                   ch->is_first ? NULL : ch->dx_in[slot], loss_scale));
    else
        GT_CHECK(gt_stage_backward_weight(ch->stage, slot));
    if (armed && p->overlap) GT_CHECK(gt_bucketer_finish(&p->bucketer));
cleanup:
    if (armed) gt_stage_set_grad_ready(ch->stage, NULL, NULL);
    return rc;
}

/* Runs the table; adds the last stage's micro-batch losses into *loss_sum. */
static int run_table(gt_pipeline *p, const int32_t *actions, int n, const int32_t *tokens,
                     const int32_t *targets, double *loss_sum, gt_step_result *r, double t_start) {
    int rc = GT_OK;
    const size_t BT = (size_t)p->B * (size_t)p->T;
    const float loss_scale = 1.0f / (float)(p->m * p->dp);
    for (int i = 0; i < n; i++) {
        const int32_t *a = actions + (size_t)i * GT_ACTION_WIDTH;
        int op = a[0], s = a[1], mb = a[2], slot = a[3], peer = a[4];
        gt_chunk *ch = NULL;
        double t0 = now_s();
        int ready = 0;
        if (op <= GT_OP_WEIGHT) /* compute again: a bracketed update (if any) is behind it */
            GT_CHECK(gt_comm_update_end(p->comm));
        if (op != GT_OP_WAIT) {
            GT_CHECK(chunk_of(p, s, &ch));
            if (mb < 0 || mb >= p->m || slot < 0 || slot >= ch->n_slots)
                GT_FAIL(GT_ESTATE, "action %d: micro-batch %d / slot %d out of range", i, mb,
                        slot);
            if (i == p->first_grad[s / p->pp]) /* restarted where first needed: off the fill */
                GT_CHECK(gt_stage_start_accumulation(ch->stage));
        }
        switch (op) {
        case GT_OP_FORWARD: {
            float loss = 0.0f;
            GT_CHECK(gt_stage_forward(ch->stage, slot, ch->is_first ? tokens + mb * BT : NULL,
                                      ch->is_first ? NULL : ch->x_in[slot],
                                      ch->is_last ? NULL : ch->x_out[slot],
                                      ch->is_last ? targets + mb * BT : NULL,
                                      ch->is_last ? &loss : NULL));
            if (ch->is_last) *loss_sum += (double)loss;
            break;
        }
        case GT_OP_BACKWARD:
        case GT_OP_WEIGHT:
            GT_CHECK(grad_action(p, ch, op, slot, loss_scale, i == p->last_grad[s / p->pp]));
            break;
        case GT_OP_BACKWARD_INPUT:
            GT_CHECK(gt_stage_backward_input(ch->stage, slot,
                                             ch->is_last ? NULL : ch->dx_out[slot],
                                             ch->is_first ? NULL : ch->dx_in[slot], loss_scale));
            break;
        case GT_OP_SEND_ACT:
            GT_CHECK(gt_comm_isend(p->comm, i, peer, GT_MSG_ACT, ch->x_out[slot], ch->act_bytes));
            break;
        case GT_OP_SEND_GRAD:
            GT_CHECK(gt_comm_isend(p->comm, i, peer, GT_MSG_GRAD, ch->dx_in[slot], ch->act_bytes));
            break;
        case GT_OP_RECV_ACT:
            GT_CHECK(gt_comm_irecv(p->comm, i, peer, GT_MSG_ACT, ch->x_in[slot], ch->act_bytes));
            break;
        case GT_OP_RECV_GRAD:
            GT_CHECK(gt_comm_irecv(p->comm, i, peer, GT_MSG_GRAD, ch->dx_out[slot], ch->act_bytes));
            break;
        case GT_OP_WAIT:
            if (peer < 0 || peer >= i) GT_FAIL(GT_ESTATE, "action %d waits on %d", i, peer);
            GT_CHECK(gt_comm_wait(p->comm, peer, &ready));
            break;
        default:
            GT_FAIL(GT_ESTATE, "action %d has unknown op %d", i, op);
        }
        if (op <= GT_OP_WEIGHT) GT_CHECK(gt_stage_synchronize(ch->stage));
        double t1 = now_s(), dt = t1 - t0;
        if (op <= GT_OP_WEIGHT) r->compute_s += dt;
        else if (op == GT_OP_SEND_ACT || op == GT_OP_SEND_GRAD) r->send_s += dt;
        else if (op == GT_OP_RECV_ACT || op == GT_OP_RECV_GRAD) r->recv_s += dt;
        else {
            int waited = actions[(size_t)peer * GT_ACTION_WIDTH];
            if (waited == GT_OP_SEND_ACT || waited == GT_OP_SEND_GRAD) r->send_s += dt;
            else if (ready) r->recv_s += dt;
            else r->bubble_s += dt;
        }
        if (op != GT_OP_WAIT || !ready) {
            gt_trace_event *e = &p->trace[p->trace_count++];
            e->op = op == GT_OP_WAIT ? -actions[(size_t)peer * GT_ACTION_WIDTH] : op;
            e->stage = op == GT_OP_WAIT ? actions[(size_t)peer * GT_ACTION_WIDTH + 1] : s;
            e->micro_batch = op == GT_OP_WAIT ? actions[(size_t)peer * GT_ACTION_WIDTH + 2] : mb;
            e->t0 = t0 - t_start;
            e->t1 = t1 - t_start;
        }
    }
cleanup:
    return rc;
}

/* 1 if chunk c's AdamW runs from the gradients-ready hook this step (and its norm is captured
 * from those ranges). */
static int hook_updates(const gt_pipeline *p, int c) { return p->opt_now && p->last_grad[c] >= 0; }

/* 1 if chunk c's norm comes from its AdamW ranges this step (GANTRY_NORM_CAPTURE). */
static int captures_norm(const gt_pipeline *p, int c) {
    return p->norm_capture && hook_updates(p, c);
}

/* Sum of squares of chunk c's gradients for the global norm (wte once per tied pair: the first
 * stage counts it). A chunk updated by the hook: its tied wte copy is updated here (counted on
 * the first stage, not on the last), then the capture of its ranges ends. */
static int chunk_sq_sum(gt_pipeline *p, int c, double *out) {
    int rc = GT_OK;
    gt_chunk *ch = &p->chunks[c];
    size_t off = 0, count = 0;
    if (!captures_norm(p, c)) {
        GT_CHECK(gt_stage_grad_sq_sum(ch->stage, !(ch->is_last && !ch->is_first), out));
        goto cleanup;
    }
    int tied = tied_wte(ch, &off, &count);
    if (tied && ch->is_first) GT_CHECK(update_range(p, ch, off, count, 1.0f));
    GT_CHECK(gt_stage_norm_capture_end(ch->stage, out));
    if (tied && !ch->is_first) GT_CHECK(update_range(p, ch, off, count, 1.0f));
cleanup:
    return rc;
}

/* Data-parallel all-reduce (waiting for the overlapped buckets, or whole buffers), tied wte
 * (of the dp-reduced gradients), global norm and the step's loss (*loss_sum: summed over the
 * world), clipping, AdamW (none of a chunk whose ranges the hook updated: its tied wte copy
 * was updated with its norm);
 * the stages' streams then wait for their optimizer's, but the host does not: a rank whose next
 * step starts with a receive (every pipeline rank but the first) runs its update during that
 * wait. The loss and norm are all-reduced before any update but a hook-updating chunk's own
 * (its ranges and its tied wte copy, which its captured norm waits for), so no rank waits for
 * another's optimizer either. */
static int sync_and_update(gt_pipeline *p, const gt_step_args *args, double *loss_sum,
                           gt_step_result *r) {
    int rc = GT_OK;
    double sq = 0.0, t0 = now_s();
    if (p->overlap) {
        GT_CHECK(gt_comm_dp_wait_all(p->comm));
        r->dp_wait_s = now_s() - t0;
        r->dp_buckets = p->dp_buckets;
    }
    double t_tied = now_s();
    for (int c = 0; c < p->v; c++) {
        gt_chunk *ch = &p->chunks[c];
        float *grads = gt_stage_buffer(ch->stage, GT_BUF_GRADS);
        size_t off = 0, count = 0;
        if (!p->overlap || p->last_grad[c] < 0) /* not overlapped */
            GT_CHECK(gt_comm_allreduce_dp(p->comm, grads, gt_stage_num_params(ch->stage)));
        if (tied_wte(ch, &off, &count))
            GT_CHECK(gt_comm_allreduce_tied(p->comm, grads + off, count));
    }
    for (int c = 0; c < p->v; c++) GT_CHECK(gt_stage_synchronize(p->chunks[c].stage));
    double t_norm = now_s();
    r->tied_s = t_norm - t_tied;
    for (int c = 0; c < p->v; c++) {
        double part = 0.0;
        GT_CHECK(chunk_sq_sum(p, c, &part));
        sq += part;
    }
    GT_CHECK(gt_comm_allreduce_pipe_double(p->comm, &sq));
    GT_CHECK(gt_comm_allreduce_world_double(p->comm, loss_sum));
    r->norm_s = now_s() - t_norm;
    r->grad_norm = sqrt(sq);
    float scale = args->grad_clip > 0.0f ? gt_clip_coef(r->grad_norm, args->grad_clip) : 1.0f;
    r->lr = p->lr_now;
    GT_CHECK(gt_comm_update_begin(p->comm)); /* the next step's first receives need not wait */
    for (int c = 0; c < p->v; c++) {
        gt_chunk *ch = &p->chunks[c];
        size_t off = 0, count = 0;
        if (!hook_updates(p, c))
            GT_CHECK(gt_stage_adamw_step(ch->stage, (float)p->lr_now, args->beta1, args->beta2,
                                         args->eps, args->weight_decay, args->step + 1, scale));
        else if (!captures_norm(p, c) && tied_wte(ch, &off, &count)) /* the hook did the rest */
            GT_CHECK(update_range(p, ch, off, count, scale));
    }
    for (int c = 0; c < p->v; c++) GT_CHECK(gt_stage_join_optimizer(p->chunks[c].stage));
    r->opt_ranges = p->opt_ranges;
cleanup:
    return rc;
}

int gt_pipeline_step(gt_pipeline *p, const int32_t *actions, int n_actions,
                     const int32_t *tokens, const int32_t *targets, const gt_step_args *args,
                     gt_step_result *result) {
    int rc = GT_OK;
    gt_step_result r;
    memset(&r, 0, sizeof(r));
    double t_start = now_s();
    double loss_sum = 0.0;
    if (n_actions > p->trace_cap) {
        gt_trace_event *grown = realloc(p->trace, (size_t)n_actions * sizeof(*grown));
        if (grown == NULL) GT_FAIL(GT_ENOMEM, "out of memory for %d trace events", n_actions);
        p->trace = grown;
        p->trace_cap = n_actions;
    }
    p->trace_count = 0;
    GT_CHECK(gt_comm_reserve(p->comm, n_actions));
    p->step_args = *args;
    p->lr_now = gt_lr_at((gt_lr_kind)args->lr_kind, args->step, args->max_lr, args->min_lr,
                         args->warmup_steps, args->total_steps);
    p->opt_now = (p->opt_overlap == 1 || p->opt_overlap == 3 ||
                   (p->opt_overlap == 2 && p->pipe_rank == 0)) &&
                  p->dp == 1 && !(args->grad_clip > 0.0f);
    p->opt_ranges = 0;
    find_grad_actions(p, actions, n_actions);
    for (int c = 0; c < p->v; c++) {
        if (p->first_grad[c] < 0) /* no gradient action this step: zero now */
            GT_CHECK(gt_stage_zero_grad(p->chunks[c].stage));
        if (captures_norm(p, c)) GT_CHECK(gt_stage_norm_capture_begin(p->chunks[c].stage));
    }
    p->dp_buckets = 0;
    GT_CHECK(run_table(p, actions, n_actions, tokens, targets, &loss_sum, &r, t_start));
    double t_sync = now_s();
    GT_CHECK(sync_and_update(p, args, &loss_sum, &r));
    r.loss = loss_sum / (double)(p->m * p->dp);
    double t_end = now_s();
    r.sync_s = t_end - t_sync;
    r.total_s = t_end - t_start;
    *result = r;
cleanup:
    return rc;
}
