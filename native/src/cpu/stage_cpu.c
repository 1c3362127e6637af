/*
 * stage_cpu.c — one pipeline stage of GPT-2 on the CPU: creation (tensor table, buffers, activation
 * slots), forward and backward (split into input and weight gradients for zero-bubble schedules),
 * as the backend hooks of stage_slots.h (which checks the calls and keeps the slot states).
 *
 * Notation: N = B*T rows, C channels, V vocabulary, nl = owned layers. The residual stream entering
 * local layer l is x0 (l = 0) or res3[l-1]; a layer computes
 *   ln1 = LN(x); qkv = ln1 @ Wqkv + b; atty = attn(qkv); res2 = x + atty @ Wap + b
 *   ln2 = LN(res2); fch = ln2 @ Wfc + b; fch_gelu = gelu(fch); res3 = res2 + fch_gelu @ Wfp + b
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "cpu/ops.h"
#include "cpu/stage_cpu.h"
#include "stage_slots.h"

/* ------------------------------------------------------------------------------------------ */
/* activation and activation-gradient storage                                                  */

static float *carve(float **cursor, size_t n) {
    float *p = *cursor;
    *cursor += n;
    return p;
}

/* Sizes (floats) of one slot's activations; with block == NULL only counts. */
static size_t layout_slot(const gt_stage *s, gt_slot *slot, float *block) {
    size_t N = (size_t)s->layout.B * s->layout.T, C = (size_t)s->layout.cfg.n_embd;
    size_t V = (size_t)s->layout.cfg.vocab_size;
    size_t att = (size_t)s->layout.B * s->layout.cfg.n_head * s->layout.T * s->layout.T;
    float *cur = block;
    gt_slot dummy;
    gt_slot *t = block ? slot : &dummy;
    t->x0 = carve(&cur, N * C);
    for (int l = 0; l < s->layout.nl; l++) {
        float *x;
        x = carve(&cur, N * C); if (block) t->ln1[l] = x;
        x = carve(&cur, N); if (block) t->ln1_mean[l] = x;
        x = carve(&cur, N); if (block) t->ln1_rstd[l] = x;
        x = carve(&cur, 3 * N * C); if (block) t->qkv[l] = x;
        x = carve(&cur, N * C); if (block) t->atty[l] = x;
        x = carve(&cur, att); if (block) t->att[l] = x;
        x = carve(&cur, N * C); if (block) t->res2[l] = x;
        x = carve(&cur, N * C); if (block) t->ln2[l] = x;
        x = carve(&cur, N); if (block) t->ln2_mean[l] = x;
        x = carve(&cur, N); if (block) t->ln2_rstd[l] = x;
        x = carve(&cur, 4 * N * C); if (block) t->fch[l] = x;
        x = carve(&cur, 4 * N * C); if (block) t->fch_gelu[l] = x;
        x = carve(&cur, N * C); if (block) t->res3[l] = x;
    }
    if (s->layout.is_last) {
        t->lnf = carve(&cur, N * C);
        t->lnf_mean = carve(&cur, N);
        t->lnf_rstd = carve(&cur, N);
        t->probs = carve(&cur, N * V);
        t->losses = carve(&cur, N);
    }
    return (size_t)(cur - block);
}

static int slot_alloc(const gt_stage *s, gt_slot *slot) {
    int rc = GT_OK;
    size_t N = (size_t)s->layout.B * s->layout.T;
    int nl = s->layout.nl;
    GT_CALLOC(slot->ptrs, (size_t)13 * (nl > 0 ? nl : 1));
    float ***arrays[13] = {&slot->ln1, &slot->ln1_mean, &slot->ln1_rstd, &slot->qkv,
                           &slot->atty, &slot->att, &slot->res2, &slot->ln2, &slot->ln2_mean,
                           &slot->ln2_rstd, &slot->fch, &slot->fch_gelu, &slot->res3};
    for (int i = 0; i < 13; i++) *arrays[i] = slot->ptrs + (size_t)i * (nl > 0 ? nl : 1);
    size_t total = layout_slot(s, slot, NULL);
    GT_CALLOC(slot->block, total);
    layout_slot(s, slot, slot->block);
    if (s->layout.is_first) GT_CALLOC(slot->tokens, N);
    if (s->layout.is_last) GT_CALLOC(slot->targets, N);
cleanup:
    return rc;
}

static void slot_release(gt_slot *slot) {
    free(slot->block);
    free(slot->ptrs);
    free(slot->tokens);
    free(slot->targets);
}

static size_t layout_grads(const gt_stage *s, gt_grad_acts *g, float *block) {
    size_t N = (size_t)s->layout.B * s->layout.T, C = (size_t)s->layout.cfg.n_embd;
    float *cur = block;
    for (int l = 0; l <= s->layout.nl; l++) {
        float *x = carve(&cur, N * C);
        if (block) g->dresid[l] = x;
    }
    for (int l = 0; l < s->layout.nl; l++) {
        float *x;
        x = carve(&cur, N * C); if (block) g->dres2[l] = x;
        x = carve(&cur, N * C); if (block) g->dln1[l] = x;
        x = carve(&cur, N * C); if (block) g->dln2[l] = x;
        x = carve(&cur, 3 * N * C); if (block) g->dqkv[l] = x;
        x = carve(&cur, 4 * N * C); if (block) g->dfch[l] = x;
    }
    if (s->layout.is_last) {
        float *x = carve(&cur, N * C);
        if (block) g->dlnf = x;
    }
    return (size_t)(cur - block);
}

static int grads_alloc(const gt_stage *s, gt_grad_acts *g) {
    int rc = GT_OK;
    int nl1 = s->layout.nl + 1;
    GT_CALLOC(g->ptrs, (size_t)6 * nl1);
    g->dresid = g->ptrs;
    g->dres2 = g->ptrs + nl1;
    g->dln1 = g->ptrs + 2 * (size_t)nl1;
    g->dln2 = g->ptrs + 3 * (size_t)nl1;
    g->dqkv = g->ptrs + 4 * (size_t)nl1;
    g->dfch = g->ptrs + 5 * (size_t)nl1;
    GT_CALLOC(g->block, layout_grads(s, NULL, NULL));
    layout_grads(s, g, g->block);
cleanup:
    return rc;
}

static void grads_release(gt_grad_acts *g) {
    free(g->block);
    free(g->ptrs);
}

/* ------------------------------------------------------------------------------------------ */
/* create / free                                                                               */

int gt_stage_create(const gt_config *cfg, int layer_begin, int layer_end, int is_first,
                    int is_last, int B, int T, int n_slots, gt_stage **out) {
    int rc = GT_OK;
    gt_stage *s = NULL;
    if (out == NULL) GT_INPUT_FAIL("gt_stage_create: out is NULL");
    *out = NULL;
    GT_CHECK(gt_stage_check_config(cfg));
    GT_CHECK(gt_stage_check_placement(cfg, layer_begin, layer_end, is_first, is_last, B, T,
                                      n_slots));
    GT_CALLOC(s, 1);
    GT_CHECK(gt_stage_layout_init(&s->layout, cfg, layer_begin, layer_end, is_first, is_last, B,
                                  T, n_slots));
    for (int i = 0; i < 4; i++) GT_CALLOC(s->buffers[i], s->layout.num_params);
    GT_CHECK(gt_stage_slots_init(&s->layout));
    GT_CALLOC(s->slots, n_slots);
    for (int i = 0; i < n_slots; i++) GT_CHECK(slot_alloc(s, &s->slots[i]));
    GT_CHECK(grads_alloc(s, &s->shared_grads));
    size_t N = (size_t)B * T, C = (size_t)cfg->n_embd;
    GT_CALLOC(s->scratch_datty, N * C);
    GT_CALLOC(s->scratch_colsum, (size_t)GT_COLSUM_CHUNKS * 4 * C);
    GT_CALLOC(s->scratch_att, (size_t)T * T);
    *out = s;
    s = NULL;
cleanup:
    gt_stage_free(s);
    return rc;
}

void gt_stage_free(gt_stage *s) {
    if (s == NULL) return;
    if (s->slots != NULL)
        for (int i = 0; i < s->layout.n_slots; i++) slot_release(&s->slots[i]);
    gt_stage_slots_release(&s->layout);
    grads_release(&s->shared_grads);
    free(s->slots);
    for (int i = 0; i < 4; i++) free(s->buffers[i]);
    gt_stage_layout_release(&s->layout);
    free(s->scratch_datty);
    free(s->scratch_colsum);
    free(s->scratch_att);
    free(s);
}

/* ------------------------------------------------------------------------------------------ */
/* accessors                                                                                   */

float *gt_stage_buffer(gt_stage *s, gt_buffer which) {
    if (s == NULL || (int)which < 0 || (int)which > 3) return NULL;
    return s->buffers[which];
}

/* ------------------------------------------------------------------------------------------ */
/* forward                                                                                     */

int gt_be_forward(gt_stage *s, int slot, const int32_t *tokens, const float *x_in, float *x_out,
                  const int32_t *targets, float *loss_out) {
    size_t N = (size_t)s->layout.B * s->layout.T;
    int B = s->layout.B, T = s->layout.T, C = s->layout.cfg.n_embd;
    int V = s->layout.cfg.vocab_size, NH = s->layout.cfg.n_head;
    gt_slot *a = &s->slots[slot];
    float *P = s->buffers[GT_BUF_PARAMS];

    if (s->layout.is_first) {
        const float *wte = P + s->layout.tensors[0].offset;
        const float *wpe = P + s->layout.tensors[1].offset;
        memcpy(a->tokens, tokens, N * sizeof(int32_t));
        gt_encoder_forward(a->x0, tokens, wte, wpe, B, T, C);
    } else {
        memcpy(a->x0, x_in, N * C * sizeof(float));
    }
    for (int l = 0; l < s->layout.nl; l++) {
        const float *x = l == 0 ? a->x0 : a->res3[l - 1];
        gt_layernorm_forward(a->ln1[l], a->ln1_mean[l], a->ln1_rstd[l], x,
                             gt_layer_tensor(s, P, l, GT_LN1_W), gt_layer_tensor(s, P, l, GT_LN1_B),
                             N, C);
        gt_matmul_forward(a->qkv[l], a->ln1[l], gt_layer_tensor(s, P, l, GT_QKV_W),
                          gt_layer_tensor(s, P, l, GT_QKV_B), N, C, 3 * C);
        gt_attention_forward(a->atty[l], a->att[l], a->qkv[l], B, T, C, NH);
        gt_matmul_forward(a->res2[l], a->atty[l], gt_layer_tensor(s, P, l, GT_ATTPROJ_W),
                          gt_layer_tensor(s, P, l, GT_ATTPROJ_B), N, C, C);
        gt_residual_forward(a->res2[l], a->res2[l], x, N * C);
        gt_layernorm_forward(a->ln2[l], a->ln2_mean[l], a->ln2_rstd[l], a->res2[l],
                             gt_layer_tensor(s, P, l, GT_LN2_W), gt_layer_tensor(s, P, l, GT_LN2_B),
                             N, C);
        gt_matmul_forward(a->fch[l], a->ln2[l], gt_layer_tensor(s, P, l, GT_FC_W),
                          gt_layer_tensor(s, P, l, GT_FC_B), N, C, 4 * C);
        gt_gelu_forward(a->fch_gelu[l], a->fch[l], N * 4 * C);
        gt_matmul_forward(a->res3[l], a->fch_gelu[l], gt_layer_tensor(s, P, l, GT_FCPROJ_W),
                          gt_layer_tensor(s, P, l, GT_FCPROJ_B), N, 4 * C, C);
        gt_residual_forward(a->res3[l], a->res3[l], a->res2[l], N * C);
    }
    const float *out = s->layout.nl > 0 ? a->res3[s->layout.nl - 1] : a->x0;
    if (s->layout.is_last) {
        const float *wte = P + s->layout.tensors[0].offset;
        const float *lnfw = P + s->layout.tensors[s->layout.num_tensors - 2].offset;
        const float *lnfb = P + s->layout.tensors[s->layout.num_tensors - 1].offset;
        gt_layernorm_forward(a->lnf, a->lnf_mean, a->lnf_rstd, out, lnfw, lnfb, N, C);
        gt_head_forward(a->probs, a->lnf, wte, N, C, V);
        *loss_out = gt_softmax_crossentropy_forward(a->probs, a->losses, targets, N, V);
        memcpy(a->targets, targets, N * sizeof(int32_t));
    } else {
        memcpy(x_out, out, N * C * sizeof(float));
    }
    return GT_OK;
}

/* ------------------------------------------------------------------------------------------ */
/* backward                                                                                    */

static void backward_input(gt_stage *s, gt_slot *a, gt_grad_acts *g, const float *dx_out,
                           float *dx_in, float loss_scale) {
    size_t N = (size_t)s->layout.B * s->layout.T;
    int B = s->layout.B, T = s->layout.T, C = s->layout.cfg.n_embd;
    int V = s->layout.cfg.vocab_size, NH = s->layout.cfg.n_head;
    float *P = s->buffers[GT_BUF_PARAMS];
    int nl = s->layout.nl;
    if (s->layout.is_last) {
        const float *out = nl > 0 ? a->res3[nl - 1] : a->x0;
        const float *wte = P + s->layout.tensors[0].offset;
        const float *lnfw = P + s->layout.tensors[s->layout.num_tensors - 2].offset;
        /* probs -> dlogits (N,V), kept in the slot for the head's weight gradient */
        gt_softmax_crossentropy_backward(a->probs, a->targets, N, V, loss_scale / (float)N);
        gt_head_backward_input(g->dlnf, a->probs, wte, N, C, V);
        memset(g->dresid[nl], 0, N * C * sizeof(float));
        gt_layernorm_backward_input(g->dresid[nl], g->dlnf, out, a->lnf_mean, a->lnf_rstd, lnfw, N,
                                    C);
    } else {
        memcpy(g->dresid[nl], dx_out, N * C * sizeof(float));
    }
    for (int l = nl - 1; l >= 0; l--) {
        const float *x = l == 0 ? a->x0 : a->res3[l - 1];
        const float *dout = g->dresid[l + 1];
        /* MLP */
        gt_matmul_backward_input(g->dfch[l], dout, gt_layer_tensor(s, P, l, GT_FCPROJ_W), N, 4 * C,
                                 C, 0);
        gt_gelu_backward(g->dfch[l], a->fch[l], g->dfch[l], N * 4 * C);
        gt_matmul_backward_input(g->dln2[l], g->dfch[l], gt_layer_tensor(s, P, l, GT_FC_W), N, C,
                                 4 * C, 0);
        memcpy(g->dres2[l], dout, N * C * sizeof(float));
        gt_layernorm_backward_input(g->dres2[l], g->dln2[l], a->res2[l], a->ln2_mean[l],
                                    a->ln2_rstd[l], gt_layer_tensor(s, P, l, GT_LN2_W), N, C);
        /* attention */
        gt_matmul_backward_input(s->scratch_datty, g->dres2[l],
                                 gt_layer_tensor(s, P, l, GT_ATTPROJ_W), N, C, C, 0);
        gt_attention_backward(g->dqkv[l], s->scratch_datty, a->qkv[l], a->att[l], B, T, C, NH,
                              s->scratch_att);
        gt_matmul_backward_input(g->dln1[l], g->dqkv[l], gt_layer_tensor(s, P, l, GT_QKV_W), N, C,
                                 3 * C, 0);
        memcpy(g->dresid[l], g->dres2[l], N * C * sizeof(float));
        gt_layernorm_backward_input(g->dresid[l], g->dln1[l], x, a->ln1_mean[l], a->ln1_rstd[l],
                                    gt_layer_tensor(s, P, l, GT_LN1_W), N, C);
    }
    if (!s->layout.is_first) memcpy(dx_in, g->dresid[0], N * C * sizeof(float));
}

/* Weight gradients of one micro-batch; reports each range to an armed gradients-ready hook
 * (stage.h) right after its last accumulation. */
static int backward_weight(gt_stage *s, gt_slot *a, gt_grad_acts *g) {
    int rc = GT_OK;
    size_t N = (size_t)s->layout.B * s->layout.T;
    int B = s->layout.B, T = s->layout.T, C = s->layout.cfg.n_embd, V = s->layout.cfg.vocab_size;
    float *G = s->buffers[GT_BUF_GRADS];
    float *scratch = s->scratch_colsum;
    int nl = s->layout.nl;
    if (s->layout.is_last) {
        const float *out = nl > 0 ? a->res3[nl - 1] : a->x0;
        gt_head_backward_weight(G + s->layout.tensors[0].offset, a->probs, a->lnf, N, C, V);
        gt_layernorm_backward_weight(G + s->layout.tensors[s->layout.num_tensors - 2].offset,
                                     G + s->layout.tensors[s->layout.num_tensors - 1].offset,
                                     g->dlnf, out, a->lnf_mean, a->lnf_rstd, N, C, scratch);
        GT_CHECK(gt_stage_report_head(&s->layout));
    }
    for (int l = nl - 1; l >= 0; l--) {
        const float *x = l == 0 ? a->x0 : a->res3[l - 1];
        gt_matmul_backward_weight(gt_layer_tensor(s, G, l, GT_FCPROJ_W),
                                  gt_layer_tensor(s, G, l, GT_FCPROJ_B), g->dresid[l + 1],
                                  a->fch_gelu[l], N, 4 * C, C, scratch);
        gt_matmul_backward_weight(gt_layer_tensor(s, G, l, GT_FC_W),
                                  gt_layer_tensor(s, G, l, GT_FC_B), g->dfch[l], a->ln2[l], N, C,
                                  4 * C, scratch);
        gt_layernorm_backward_weight(gt_layer_tensor(s, G, l, GT_LN2_W),
                                     gt_layer_tensor(s, G, l, GT_LN2_B), g->dln2[l], a->res2[l],
                                     a->ln2_mean[l], a->ln2_rstd[l], N, C, scratch);
        gt_matmul_backward_weight(gt_layer_tensor(s, G, l, GT_ATTPROJ_W),
                                  gt_layer_tensor(s, G, l, GT_ATTPROJ_B), g->dres2[l], a->atty[l],
                                  N, C, C, scratch);
        gt_matmul_backward_weight(gt_layer_tensor(s, G, l, GT_QKV_W),
                                  gt_layer_tensor(s, G, l, GT_QKV_B), g->dqkv[l], a->ln1[l], N, C,
                                  3 * C, scratch);
        gt_layernorm_backward_weight(gt_layer_tensor(s, G, l, GT_LN1_W),
                                     gt_layer_tensor(s, G, l, GT_LN1_B), g->dln1[l], x,
                                     a->ln1_mean[l], a->ln1_rstd[l], N, C, scratch);
        GT_CHECK(gt_stage_report_layer(&s->layout, l));
    }
    if (s->layout.is_first) {
        gt_encoder_backward(G + s->layout.tensors[0].offset, G + s->layout.tensors[1].offset,
                            g->dresid[0], a->tokens, B, T, C);
        GT_CHECK(gt_stage_report_embeddings(&s->layout));
    }
cleanup:
    return rc;
}

int gt_be_backward(gt_stage *s, int slot, const float *dx_out, float *dx_in, float loss_scale) {
    backward_input(s, &s->slots[slot], &s->shared_grads, dx_out, dx_in, loss_scale);
    return backward_weight(s, &s->slots[slot], &s->shared_grads);
}

int gt_be_backward_input(gt_stage *s, int slot, void *grads, const float *dx_out, float *dx_in,
                         float loss_scale) {
    backward_input(s, &s->slots[slot], grads, dx_out, dx_in, loss_scale);
    return GT_OK;
}

int gt_be_backward_weight(gt_stage *s, int slot, void *grads) {
    return backward_weight(s, &s->slots[slot], grads);
}

int gt_be_slot_grads_alloc(gt_stage *s, void **out) {
    int rc = GT_OK;
    gt_grad_acts *g = NULL;
    GT_CALLOC(g, 1);
    GT_CHECK(grads_alloc(s, g));
    *out = g;
    g = NULL;
cleanup:
    gt_be_slot_grads_free(g);
    return rc;
}

void gt_be_slot_grads_free(void *grads) {
    if (grads == NULL) return;
    grads_release(grads);
    free(grads);
}
