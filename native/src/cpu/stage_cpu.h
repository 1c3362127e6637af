/*
 * stage_cpu.h — the CPU build's gt_stage struct, shared by stage_cpu.c (compute), optim_cpu.c
 * (AdamW, norms) and backend_cpu.c (buffer copies, save). Its backend-independent part (layers,
 * geometry, slot states, tensor table) is the gt_stage_layout of stage_layout.h. Not part of the
 * public API.
 */
#ifndef GANTRY_CPU_STAGE_CPU_H
#define GANTRY_CPU_STAGE_CPU_H

#include <stddef.h>
#include <stdint.h>

#include "gantry/stage.h"
#include "stage_layout.h"

/* Forward activations of one micro-batch (one slot). N = B*T, nl = owned layers. */
typedef struct {
    float *x0;              /* (N,C) stage input: embeddings (first) or a copy of x_in */
    float **ln1, **ln1_mean, **ln1_rstd; /* [nl] (N,C), (N), (N) */
    float **qkv;            /* [nl] (N,3C) */
    float **atty;           /* [nl] (N,C) attention output before c_proj */
    float **att;            /* [nl] (B,NH,T,T) softmax probabilities */
    float **res2;           /* [nl] (N,C) residual after attention */
    float **ln2, **ln2_mean, **ln2_rstd; /* [nl] (N,C), (N), (N) */
    float **fch;            /* [nl] (N,4C) c_fc output (pre-GELU) */
    float **fch_gelu;       /* [nl] (N,4C) */
    float **res3;           /* [nl] (N,C) layer output */
    float *lnf, *lnf_mean, *lnf_rstd; /* last: (N,C), (N), (N) */
    float *probs;           /* last: (N,V) probabilities; dlogits after backward_input */
    float *losses;          /* last: (N) */
    int32_t *tokens;        /* first: (N) copy of the input tokens */
    int32_t *targets;       /* last: (N) copy of the targets */
    float *block;           /* the one allocation behind the float pointers above */
    float **ptrs;           /* the one allocation behind the per-layer pointer arrays */
} gt_slot;

/* Activation gradients of one micro-batch: what backward_weight needs from backward_input. */
typedef struct {
    float **dresid;  /* [nl+1] (N,C): dresid[l] = d(input of local layer l), dresid[nl] = d(output) */
    float **dres2;   /* [nl] (N,C) */
    float **dln1;    /* [nl] (N,C) */
    float **dln2;    /* [nl] (N,C) */
    float **dqkv;    /* [nl] (N,3C) */
    float **dfch;    /* [nl] (N,4C) gradient at the c_fc output (pre-GELU) */
    float *dlnf;     /* last: (N,C) */
    float *block;
    float **ptrs;
} gt_grad_acts;

struct gt_stage {
    gt_stage_layout layout;  /* first: see gt_stage_layout_of */

    float *buffers[4];       /* params, grads, adam m, adam v: num_params each */

    gt_slot *slots;          /* [n_slots] */
    gt_grad_acts shared_grads;      /* used by the fused gt_stage_backward; the split
                                       backward's per-slot ones are layout.slot_grads */

    float *scratch_datty;    /* (N,C) */
    float *scratch_colsum;   /* GT_COLSUM_CHUNKS * 4C */
    float *scratch_att;      /* (T,T) attention backward */

    double norm_sq;          /* the captured ranges' sum of squares */
};

_Static_assert(offsetof(struct gt_stage, layout) == 0, "gt_stage_layout_of needs layout first");

/* Pointer to tensor k (GT_LN1_W..) of local layer l in buffer `buf`. */
static inline float *gt_layer_tensor(const gt_stage *s, float *buf, int l, int k) {
    return buf + gt_layer_tensor_offset(&s->layout, l, k);
}

#endif /* GANTRY_CPU_STAGE_CPU_H */
