/*
 * op_profile.c — per-operation GPU timing of the CUDA stage (see op_profile.h).
 */
#include "cuda/op_profile.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const k_names[GT_P_COUNT] = {
    "input", "encoder", "layernorm", "qkv", "attention", "attn_proj", "fc_gelu", "fc_proj",
    "head", "cross_entropy", "output", "d_fc_proj", "d_fc_dgelu", "d_layernorm", "d_attn_proj",
    "d_attention", "d_qkv", "d_head", "d_cross_entropy", "w_fc_proj", "w_fc", "w_attn_proj",
    "w_qkv", "w_head", "w_encoder", "adamw", "end"};

void gt_prof_init(gt_prof *p, int mode) {
    memset(p, 0, sizeof(*p));
    p->enabled = mode != 0;
    p->prefill = mode == 2;
}

void gt_prof_prefill(gt_prof *p, cudaStream_t stream) {
    if (!p->enabled || !p->prefill) return;
    if (gt_cu_spin(20ull * 1000 * 1000, stream) != cudaSuccess) p->enabled = 0;
}

void gt_prof_mark(gt_prof *p, gt_prof_op op, cudaStream_t stream) {
    if (!p->enabled) return;
    if (p->n == p->cap) {
        int cap = p->cap ? 2 * p->cap : 256;
        cudaEvent_t *ev = realloc(p->events, (size_t)cap * sizeof(*ev));
        int *ops = ev ? realloc(p->ops, (size_t)cap * sizeof(*ops)) : NULL;
        if (ev) p->events = ev;
        if (ops == NULL) {
            p->enabled = 0;
            return;
        }
        p->ops = ops;
        for (int i = p->cap; i < cap; i++) {
            if (cudaEventCreate(&p->events[i]) != cudaSuccess) {
                p->cap = i;
                p->enabled = 0;
                return;
            }
        }
        p->cap = cap;
    }
    if (cudaEventRecord(p->events[p->n], stream) != cudaSuccess) {
        p->enabled = 0;
        return;
    }
    p->ops[p->n++] = (int)op;
}

void gt_prof_flush(gt_prof *p) {
    if (!p->enabled) return;
    for (int i = 0; i + 1 < p->n; i++) {
        float ms = 0.0f;
        if (p->ops[i] == GT_P_END) continue;
        if (cudaEventElapsedTime(&ms, p->events[i], p->events[i + 1]) != cudaSuccess) continue;
        p->ms[p->ops[i]] += (double)ms;
        p->count[p->ops[i]]++;
        if (p->ops[i] == GT_P_ADAMW && ++p->steps == 1) { /* the warm-up step ends here */
            memset(p->ms, 0, sizeof(p->ms));
            memset(p->count, 0, sizeof(p->count));
        }
    }
    p->n = 0;
}

void gt_prof_report(const gt_prof *p, const char *label) {
    if (!p->enabled) return;
    double total = 0.0;
    fprintf(stderr, "gantry-op-profile {\"stage\": \"%s\", \"ops\": {", label);
    for (int i = 0, first = 1; i < GT_P_COUNT; i++) {
        if (p->count[i] == 0) continue;
        fprintf(stderr, "%s\"%s\": [%.3f, %ld]", first ? "" : ", ", k_names[i], p->ms[i],
                p->count[i]);
        total += p->ms[i];
        first = 0;
    }
    fprintf(stderr, "}, \"total_ms\": %.3f, \"steps\": %d}\n", total,
            p->steps > 0 ? p->steps - 1 : 0);
    fflush(stderr);
}

void gt_prof_release(gt_prof *p) {
    for (int i = 0; i < p->cap; i++) cudaEventDestroy(p->events[i]);
    free(p->events);
    free(p->ops);
    memset(p, 0, sizeof(*p));
}
