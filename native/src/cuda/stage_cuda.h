/*
 * stage_cuda.h — the gt_stage struct of the CUDA backend, shared by stage_cuda.c (create, free,
 * buffers, optimizer, save) and compute_cuda.c (forward / backward). Its backend-independent
 * part (layers, geometry, tensor table) is the gt_stage_layout of stage_layout.h, the same as
 * the CPU build's. Not part of the public API.
 *
 * Memory: parameters, gradients and AdamW moments are fp32 device buffers in the stage.h layout;
 * params16 is their bf16 copy used by every kernel (refreshed by AdamW, load and writes).
 * Activations of a micro-batch (one slot) are bf16 in one device allocation.
 *
 * Vocabulary: the buffers hold wte with the model's real V rows (any V), as on the CPU. Only
 * the logits are padded: their rows are gt_cu_logits_ld(V) apart (16-byte aligned rows for
 * cuBLASLt and the loss kernels' 8-wide loads); the head's products run over the V real rows
 * alone and the loss kernels leave the padded columns out of the softmax (and zero them in the
 * gradient), so the padding changes no result and there are no padded wte rows to train.
 */
#ifndef GANTRY_STAGE_CUDA_H
#define GANTRY_STAGE_CUDA_H

#include <cuda_runtime_api.h>
#include <stddef.h>
#include <stdint.h>

#include "cuda/attention_cudnn.h"
#include "cuda/graph_cache.h"
#include "cuda/kernels.h"
#include "cuda/matmul.h"
#include "cuda/op_profile.h"
#include "gantry/stage.h"
#include "runtime_config.h"
#include "stage_layout.h"

/* The actions a slot captures as CUDA graphs. */
enum { GT_GRAPH_FORWARD = 0, GT_GRAPH_BACKWARD = 1, GT_GRAPH_BACKWARD_INPUT = 2,
       GT_GRAPH_WEIGHT = 3, /* the two weight-producing kinds, fresh: products with beta 0 */
       GT_GRAPH_BACKWARD_FRESH = 4, GT_GRAPH_WEIGHT_FRESH = 5, GT_GRAPH_KINDS = 6 };

/* Forward activations of one local layer (N = B*T). */
typedef struct {
    gt_bf16 *ln1;              /* (N,C), rows C + GT_CU_LN_PAD apart, column C all ones */
    float *ln1_mean, *ln1_rstd; /* (N) */
    gt_bf16 *qkv;              /* (N,3C) = (B,T,3,NH,hs) */
    gt_bf16 *atty;             /* (N,C) attention output before c_proj */
    float *stats;              /* cuDNN: (B,NH,T) log-sum-exp */
    gt_bf16 *att;              /* reference attention: (B,NH,T,T) probabilities */
    gt_bf16 *res2;             /* (N,C) */
    gt_bf16 *ln2;              /* (N,C), as ln1 */
    float *ln2_mean, *ln2_rstd; /* (N) */
    gt_bf16 *fch;              /* (N,4C) pre-GELU */
    gt_bf16 *fch_gelu;         /* (N,4C) */
    gt_bf16 *res3;             /* (N,C) layer output */
} gt_cu_layer;

typedef struct {
    gt_cu_layer *layers;       /* [nl] (host array of device pointers) */
    gt_bf16 *x0;               /* (N,C) stage input */
    gt_bf16 *lnf;              /* last: (N,C) */
    float *lnf_mean, *lnf_rstd; /* last: (N) */
    gt_bf16 *logits;           /* last: (N,V), rows gt_cu_logits_ld(V) apart; softmax - onehot after a fused forward (ce_fused),
                                  dlogits after backward_input otherwise */
    float dlogits_scale;       /* last: alpha of the head's backward products (dloss if fused) */
    float *lse, *losses;       /* last: (N) */
    int32_t *tokens, *targets; /* device (N) */
    int32_t *groups;           /* first: device [3N+2]: token (N), start (N+1), pos (N) of the
                                  encoder groups, then their count */
    int32_t *staging;          /* pinned host: tokens (N), targets (N), groups (3N+2) */
    gt_graph_slot graphs[GT_GRAPH_KINDS]; /* captured actions of this slot (graph_cache.h) */
    cudaEvent_t uploaded;      /* after the host-to-device copies of staging */
    void *block;               /* the device allocation behind the pointers */
} gt_cu_slot;

/* Activation gradients of one local layer. */
typedef struct {
    gt_bf16 *dres2, *dln1, *dln2; /* (N,C) */
    gt_bf16 *dqkv;                /* (N,3C) */
    gt_bf16 *dfch;                /* (N,4C) gradient at the c_fc output (pre-GELU) */
} gt_cu_layer_grads;

/* Full backward keeps one layer and two residual gradients (ping-pong); the split backward
 * keeps every layer (per slot) for backward_weight. */
typedef struct {
    gt_cu_layer_grads *layers; /* [n_layers] */
    gt_bf16 **dresid;          /* [n_resid] (N,C) */
    gt_bf16 *dlnf;             /* last: (N,C) */
    int n_layers, n_resid;
    void *block;
} gt_cu_grads;

struct gt_stage {
    gt_stage_layout layout;    /* first: see gt_stage_layout_of */
    gt_runtime_config env;     /* the GANTRY_* switches, read at creation */

    float *buffers[4];         /* device fp32 */
    gt_bf16 *params16;         /* device bf16 copy of the parameters */
    uint64_t *seg_end;         /* device: AdamW decay segments */
    uint8_t *seg_decay;
    int n_segments;

    cudaStream_t stream;
    cudaStream_t opt_stream;   /* gt_stage_adamw_range (created on first use) */
    cudaEvent_t opt_ready;     /* recorded on stream before a range's update */
    cudaEvent_t opt_done;      /* recorded on opt_stream by gt_stage_join_optimizer */
    int grad_overwrite;        /* GANTRY_GRAD_OVERWRITE: restarts leave the products' tensors */
    int grads_fresh;           /* restarted: the next weight products overwrite (beta 0) */
    uint64_t *zero_chunks;     /* device (offset, count) pairs: what a restart zeroes */
    int n_zero_chunks;
    double *norm_partial;      /* gt_cu_adamw_grid_blocks(num_params), allocated on first use */
    gt_lt lt;
    gt_cudnn_attn *cudnn;      /* NULL: reference attention */
    int gelu_fused, dgelu_fused;
    int ln_bias_sums;          /* GANTRY_LN_BIAS_SUMS: LayerNorm 2 sums two bias gradients */
    int bias_in_gemm;          /* GANTRY_BIAS_GEMM: c_attn / c_fc bias gradients in the product */
    int ce_fused;              /* GANTRY_CE_FUSED: the loss and its logit gradients in one pass */
    int resid_ln;              /* GANTRY_RESID_LN: residual adds in the LayerNorm after them */
    char info[512];

    gt_cu_slot *slots;
    gt_cu_grads shared_grads;  /* the full backward's; the split backward's per-slot ones are
                                  layout.slot_grads (stage_slots.h) */

    /* scratch shared by all slots (the stream orders their uses) */
    gt_bf16 *datty;            /* (N,C) */
    gt_bf16 *proj;             /* (N,C): a projection's product before its residual add */
    float *colsum;             /* max(2 * GT_CU_COLSUM_CHUNKS * 4C, GT_CU_LN_BWD_SCRATCH(C)) */
    double *sq;                /* 1 + GT_CU_SQ_BLOCKS */
    float *loss;               /* 1 */
    float *host_loss;          /* pinned 1 */
    double *host_sq;           /* pinned 1 */
    gt_prof prof;              /* GANTRY_PROFILE_OPS */
    int graphs_enabled;        /* CUDA graphs of the actions (graph_cache.h) */
    int32_t *group_count;      /* host V+1: counting-sort scratch of the encoder groups */
    gt_bf16 *ref_qkv;          /* reference attention: q,k,v (3 * N*C), y (N*C) */
    gt_bf16 *ref_scores;       /* reference attention: 2 * (B,NH,T,T) */
};

_Static_assert(offsetof(struct gt_stage, layout) == 0, "gt_stage_layout_of needs layout first");

/* Row stride of the logits for a vocabulary of V: V rounded up to 64 columns (128-byte rows). */
#define GT_CU_LOGITS_PAD 64
static inline int gt_cu_logits_ld(int V) {
    return (V + GT_CU_LOGITS_PAD - 1) / GT_CU_LOGITS_PAD * GT_CU_LOGITS_PAD;
}

/* compute_cuda.c */
int gt_cu_alloc_slot(struct gt_stage *s, gt_cu_slot *slot);
void gt_cu_release_slot(gt_cu_slot *slot);
int gt_cu_alloc_grads(struct gt_stage *s, gt_cu_grads *g, int full);
void gt_cu_release_grads(gt_cu_grads *g);

/* grad_restart.c */
/* 1 if tensor i's gradient is written by weight products alone (what a restart leaves). */
int gt_cu_grads_from_products(const struct gt_stage *s, int i);
/* Builds the restart's chunk table (stage creation). */
int gt_cu_grads_plan(struct gt_stage *s);
/* While fresh: zeroes the product-written tensors, so the buffer reads as restarted. */
int gt_cu_grads_settle(struct gt_stage *s);

#endif /* GANTRY_STAGE_CUDA_H */
