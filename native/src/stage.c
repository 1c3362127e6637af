/*
 * stage.c — one pipeline stage of GPT-2 on the CPU: creation (tensor table, buffers, activation
 * slots), forward and backward (split into input and weight gradients for zero-bubble schedules).
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
#include "stage_internal.h"

/* ------------------------------------------------------------------------------------------ */
/* tensor table                                                                                */

#define GT_NAME_MAX 64

static const char *const gt_layer_tensor_names[GT_TENSORS_PER_LAYER] = {
    "ln_1.weight", "ln_1.bias", "attn.c_attn.weight", "attn.c_attn.bias",
    "attn.c_proj.weight", "attn.c_proj.bias", "ln_2.weight", "ln_2.bias",
    "mlp.c_fc.weight", "mlp.c_fc.bias", "mlp.c_proj.weight", "mlp.c_proj.bias"};

static void add_tensor(gt_stage *s, const char *name, int ndim, int64_t d0, int64_t d1) {
    gt_tensor_info *t = &s->tensors[s->num_tensors];
    char *storage = s->names + (size_t)s->num_tensors * GT_NAME_MAX;
    snprintf(storage, GT_NAME_MAX, "%s", name);
    t->name = storage;
    t->ndim = ndim;
    t->shape[0] = d0;
    t->shape[1] = ndim == 2 ? d1 : 0;
    t->numel = (size_t)d0 * (size_t)(ndim == 2 ? d1 : 1);
    t->offset = s->num_params;
    t->decay = ndim == 2;
    s->num_params += t->numel;
    s->num_tensors++;
}

static int build_tensor_table(gt_stage *s) {
    int rc = GT_OK;
    int64_t V = s->cfg.vocab_size, C = s->cfg.n_embd, maxT = s->cfg.max_seq_len;
    int count = s->has_wte + s->has_wpe + s->nl * GT_TENSORS_PER_LAYER + (s->is_last ? 2 : 0);
    GT_CALLOC(s->tensors, count);
    GT_CALLOC(s->names, (size_t)count * GT_NAME_MAX);
    if (s->has_wte) add_tensor(s, s->is_first ? "transformer.wte.weight" : "lm_head.weight", 2, V, C);
    if (s->has_wpe) add_tensor(s, "transformer.wpe.weight", 2, maxT, C);
    s->layer_tensor0 = s->num_tensors;
    for (int l = 0; l < s->nl; l++) {
        /* shapes in Conv1D layout (in, out) for the 2-D tensors */
        const int64_t shapes[GT_TENSORS_PER_LAYER][2] = {
            {C, 0}, {C, 0}, {C, 3 * C}, {3 * C, 0}, {C, C}, {C, 0},
            {C, 0}, {C, 0}, {C, 4 * C}, {4 * C, 0}, {4 * C, C}, {C, 0}};
        for (int k = 0; k < GT_TENSORS_PER_LAYER; k++) {
            char name[GT_NAME_MAX];
            snprintf(name, sizeof(name), "transformer.h.%d.%s", s->layer_begin + l,
                     gt_layer_tensor_names[k]);
            add_tensor(s, name, shapes[k][1] ? 2 : 1, shapes[k][0], shapes[k][1]);
        }
    }
    if (s->is_last) {
        add_tensor(s, "transformer.ln_f.weight", 1, C, 0);
        add_tensor(s, "transformer.ln_f.bias", 1, C, 0);
    }
cleanup:
    return rc;
}

/* ------------------------------------------------------------------------------------------ */
/* activation and activation-gradient storage                                                  */

static float *carve(float **cursor, size_t n) {
    float *p = *cursor;
    *cursor += n;
    return p;
}

/* Sizes (floats) of one slot's activations; with block == NULL only counts. */
static size_t layout_slot(const gt_stage *s, gt_slot *slot, float *block) {
    size_t N = (size_t)s->B * s->T, C = (size_t)s->cfg.n_embd, V = (size_t)s->cfg.vocab_size;
    size_t att = (size_t)s->B * s->cfg.n_head * s->T * s->T;
    float *cur = block;
    gt_slot dummy;
    gt_slot *t = block ? slot : &dummy;
    t->x0 = carve(&cur, N * C);
    for (int l = 0; l < s->nl; l++) {
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
    if (s->is_last) {
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
    size_t N = (size_t)s->B * s->T;
    int nl = s->nl;
    GT_CALLOC(slot->ptrs, (size_t)13 * (nl > 0 ? nl : 1));
    float ***arrays[13] = {&slot->ln1, &slot->ln1_mean, &slot->ln1_rstd, &slot->qkv,
                           &slot->atty, &slot->att, &slot->res2, &slot->ln2, &slot->ln2_mean,
                           &slot->ln2_rstd, &slot->fch, &slot->fch_gelu, &slot->res3};
    for (int i = 0; i < 13; i++) *arrays[i] = slot->ptrs + (size_t)i * (nl > 0 ? nl : 1);
    size_t total = layout_slot(s, slot, NULL);
    GT_CALLOC(slot->block, total);
    layout_slot(s, slot, slot->block);
    if (s->is_first) GT_CALLOC(slot->tokens, N);
    if (s->is_last) GT_CALLOC(slot->targets, N);
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
    size_t N = (size_t)s->B * s->T, C = (size_t)s->cfg.n_embd;
    float *cur = block;
    for (int l = 0; l <= s->nl; l++) {
        float *x = carve(&cur, N * C);
        if (block) g->dresid[l] = x;
    }
    for (int l = 0; l < s->nl; l++) {
        float *x;
        x = carve(&cur, N * C); if (block) g->dres2[l] = x;
        x = carve(&cur, N * C); if (block) g->dln1[l] = x;
        x = carve(&cur, N * C); if (block) g->dln2[l] = x;
        x = carve(&cur, 3 * N * C); if (block) g->dqkv[l] = x;
        x = carve(&cur, 4 * N * C); if (block) g->dfch[l] = x;
    }
    if (s->is_last) {
        float *x = carve(&cur, N * C);
        if (block) g->dlnf = x;
    }
    return (size_t)(cur - block);
}

static int grads_alloc(const gt_stage *s, gt_grad_acts *g) {
    int rc = GT_OK;
    int nl1 = s->nl + 1;
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

static int validate_create(const gt_config *cfg, int layer_begin, int layer_end, int is_first,
                           int is_last, int B, int T, int n_slots) {
    int rc = GT_OK;
    if (cfg == NULL) GT_INPUT_FAIL("stage config: missing (NULL)");
    if (cfg->vocab_size < 1 || cfg->max_seq_len < 1 || cfg->n_layer < 1 || cfg->n_head < 1 ||
        cfg->n_embd < 1)
        GT_INPUT_FAIL("stage config: vocab_size (%d), max_seq_len (%d), n_layer (%d), n_head (%d)"
                      " and n_embd (%d) must all be >= 1",
                      cfg->vocab_size, cfg->max_seq_len, cfg->n_layer, cfg->n_head, cfg->n_embd);
    if (cfg->n_embd % cfg->n_head != 0)
        GT_INPUT_FAIL("stage config: n_embd (%d) is not divisible by n_head (%d)", cfg->n_embd,
                      cfg->n_head);
    if (layer_begin < 0 || layer_end < layer_begin || layer_end > cfg->n_layer)
        GT_INPUT_FAIL("stage: layer range [%d, %d) is not within [0, n_layer=%d)", layer_begin,
                      layer_end, cfg->n_layer);
    if (layer_begin == layer_end && !is_first && !is_last)
        GT_INPUT_FAIL("stage: empty layer range [%d, %d) on a middle stage", layer_begin,
                      layer_end);
    if (is_first && layer_begin != 0)
        GT_INPUT_FAIL("stage: the first stage must start at layer 0 (got %d)", layer_begin);
    if (is_last && layer_end != cfg->n_layer)
        GT_INPUT_FAIL("stage: the last stage must end at n_layer=%d (got %d)", cfg->n_layer,
                      layer_end);
    if (B < 1 || T < 1 || T > cfg->max_seq_len)
        GT_INPUT_FAIL("stage: micro-batch B=%d, T=%d not allowed (need B >= 1, 1 <= T <= "
                      "max_seq_len=%d)", B, T, cfg->max_seq_len);
    if (n_slots < 1) GT_INPUT_FAIL("stage: n_slots=%d not allowed (need >= 1)", n_slots);
cleanup:
    return rc;
}

int gt_stage_create(const gt_config *cfg, int layer_begin, int layer_end, int is_first,
                    int is_last, int B, int T, int n_slots, gt_stage **out) {
    int rc = GT_OK;
    gt_stage *s = NULL;
    if (out == NULL) GT_INPUT_FAIL("gt_stage_create: out is NULL");
    *out = NULL;
    GT_CHECK(validate_create(cfg, layer_begin, layer_end, is_first, is_last, B, T, n_slots));
    GT_CALLOC(s, 1);
    s->cfg = *cfg;
    s->layer_begin = layer_begin;
    s->layer_end = layer_end;
    s->nl = layer_end - layer_begin;
    s->is_first = is_first != 0;
    s->is_last = is_last != 0;
    s->has_wte = s->is_first || s->is_last;
    s->has_wpe = s->is_first;
    s->B = B;
    s->T = T;
    s->n_slots = n_slots;
    GT_CHECK(build_tensor_table(s));
    for (int i = 0; i < 4; i++) GT_CALLOC(s->buffers[i], s->num_params);
    GT_CALLOC(s->slots, n_slots);
    for (int i = 0; i < n_slots; i++) GT_CHECK(slot_alloc(s, &s->slots[i]));
    GT_CHECK(grads_alloc(s, &s->shared_grads));
    GT_CALLOC(s->slot_grads, n_slots);
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
        for (int i = 0; i < s->n_slots; i++) slot_release(&s->slots[i]);
    if (s->slot_grads != NULL)
        for (int i = 0; i < s->n_slots; i++) {
            if (s->slot_grads[i] != NULL) grads_release(s->slot_grads[i]);
            free(s->slot_grads[i]);
        }
    grads_release(&s->shared_grads);
    free(s->slot_grads);
    free(s->slots);
    for (int i = 0; i < 4; i++) free(s->buffers[i]);
    free(s->tensors);
    free(s->names);
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

size_t gt_stage_num_params(const gt_stage *s) { return s ? s->num_params : 0; }

int gt_stage_wte_range(const gt_stage *s, size_t *offset, size_t *count) {
    int has = s != NULL && s->has_wte;
    if (offset) *offset = has ? s->tensors[0].offset : 0;
    if (count) *count = has ? s->tensors[0].numel : 0;
    return has;
}

int gt_stage_num_tensors(const gt_stage *s) { return s ? s->num_tensors : 0; }

const gt_tensor_info *gt_stage_tensor(const gt_stage *s, int i) {
    if (s == NULL || i < 0 || i >= s->num_tensors) return NULL;
    return &s->tensors[i];
}

/* ------------------------------------------------------------------------------------------ */
/* forward                                                                                     */

static int check_slot(const gt_stage *s, int slot, int want_state, const char *fn) {
    int rc = GT_OK;
    static const char *const states[] = {"free", "forward done", "input gradient done"};
    if (s == NULL) GT_INPUT_FAIL("%s: stage is NULL", fn);
    if (slot < 0 || slot >= s->n_slots)
        GT_INPUT_FAIL("%s: slot %d out of range [0, %d)", fn, slot, s->n_slots);
    if (s->slots[slot].state != want_state)
        GT_FAIL(GT_ESTATE, "%s: slot %d is '%s', expected '%s'", fn, slot,
                states[s->slots[slot].state], states[want_state]);
cleanup:
    return rc;
}

static int check_ids(const int32_t *ids, size_t N, int V, const char *what) {
    int rc = GT_OK;
    for (size_t i = 0; i < N; i++)
        if (ids[i] < 0 || ids[i] >= V)
            GT_INPUT_FAIL("%s[%zu] = %d is out of the vocabulary [0, %d)", what, i, (int)ids[i], V);
cleanup:
    return rc;
}

int gt_stage_forward(gt_stage *s, int slot, const int32_t *tokens, const float *x_in,
                     float *x_out, const int32_t *targets, float *loss_out) {
    int rc = GT_OK;
    GT_CHECK(check_slot(s, slot, GT_SLOT_FREE, "gt_stage_forward"));
    size_t N = (size_t)s->B * s->T;
    int B = s->B, T = s->T, C = s->cfg.n_embd, V = s->cfg.vocab_size, NH = s->cfg.n_head;
    gt_slot *a = &s->slots[slot];
    float *P = s->buffers[GT_BUF_PARAMS];
    if (s->is_first && tokens == NULL) GT_INPUT_FAIL("gt_stage_forward: first stage needs tokens");
    if (!s->is_first && x_in == NULL) GT_INPUT_FAIL("gt_stage_forward: x_in is NULL");
    if (!s->is_last && x_out == NULL) GT_INPUT_FAIL("gt_stage_forward: x_out is NULL");
    if (s->is_last && (targets == NULL || loss_out == NULL))
        GT_INPUT_FAIL("gt_stage_forward: last stage needs targets and loss_out");
    if (s->is_first) GT_CHECK(check_ids(tokens, N, V, "tokens"));
    if (s->is_last) GT_CHECK(check_ids(targets, N, V, "targets"));

    if (s->is_first) {
        const float *wte = P + s->tensors[0].offset, *wpe = P + s->tensors[1].offset;
        memcpy(a->tokens, tokens, N * sizeof(int32_t));
        gt_encoder_forward(a->x0, tokens, wte, wpe, B, T, C);
    } else {
        memcpy(a->x0, x_in, N * C * sizeof(float));
    }
    for (int l = 0; l < s->nl; l++) {
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
    const float *out = s->nl > 0 ? a->res3[s->nl - 1] : a->x0;
    if (s->is_last) {
        const float *wte = P + s->tensors[0].offset;
        const float *lnfw = P + s->tensors[s->num_tensors - 2].offset;
        const float *lnfb = P + s->tensors[s->num_tensors - 1].offset;
        gt_layernorm_forward(a->lnf, a->lnf_mean, a->lnf_rstd, out, lnfw, lnfb, N, C);
        gt_head_forward(a->probs, a->lnf, wte, N, C, V);
        *loss_out = gt_softmax_crossentropy_forward(a->probs, a->losses, targets, N, V);
        memcpy(a->targets, targets, N * sizeof(int32_t));
    } else {
        memcpy(x_out, out, N * C * sizeof(float));
    }
    a->state = GT_SLOT_FORWARD_DONE;
cleanup:
    return rc;
}

/* ------------------------------------------------------------------------------------------ */
/* backward                                                                                    */

static void backward_input(gt_stage *s, gt_slot *a, gt_grad_acts *g, const float *dx_out,
                           float *dx_in, float loss_scale) {
    size_t N = (size_t)s->B * s->T;
    int B = s->B, T = s->T, C = s->cfg.n_embd, V = s->cfg.vocab_size, NH = s->cfg.n_head;
    float *P = s->buffers[GT_BUF_PARAMS];
    int nl = s->nl;
    if (s->is_last) {
        const float *out = nl > 0 ? a->res3[nl - 1] : a->x0;
        const float *wte = P + s->tensors[0].offset;
        const float *lnfw = P + s->tensors[s->num_tensors - 2].offset;
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
    if (!s->is_first) memcpy(dx_in, g->dresid[0], N * C * sizeof(float));
}

static void backward_weight(gt_stage *s, gt_slot *a, gt_grad_acts *g) {
    size_t N = (size_t)s->B * s->T;
    int B = s->B, T = s->T, C = s->cfg.n_embd, V = s->cfg.vocab_size;
    float *G = s->buffers[GT_BUF_GRADS];
    float *scratch = s->scratch_colsum;
    int nl = s->nl;
    if (s->is_last) {
        const float *out = nl > 0 ? a->res3[nl - 1] : a->x0;
        gt_head_backward_weight(G + s->tensors[0].offset, a->probs, a->lnf, N, C, V);
        gt_layernorm_backward_weight(G + s->tensors[s->num_tensors - 2].offset,
                                     G + s->tensors[s->num_tensors - 1].offset, g->dlnf, out,
                                     a->lnf_mean, a->lnf_rstd, N, C, scratch);
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
    }
    if (s->is_first)
        gt_encoder_backward(G + s->tensors[0].offset, G + s->tensors[1].offset, g->dresid[0],
                            a->tokens, B, T, C);
}

static int check_backward_args(const gt_stage *s, const float *dx_out, const float *dx_in,
                               const char *fn) {
    int rc = GT_OK;
    if (!s->is_last && dx_out == NULL) GT_INPUT_FAIL("%s: dx_out is NULL on a non-last stage", fn);
    if (!s->is_first && dx_in == NULL) GT_INPUT_FAIL("%s: dx_in is NULL on a non-first stage", fn);
cleanup:
    return rc;
}

int gt_stage_backward(gt_stage *s, int slot, const float *dx_out, float *dx_in,
                      float loss_scale) {
    int rc = GT_OK;
    GT_CHECK(check_slot(s, slot, GT_SLOT_FORWARD_DONE, "gt_stage_backward"));
    GT_CHECK(check_backward_args(s, dx_out, dx_in, "gt_stage_backward"));
    backward_input(s, &s->slots[slot], &s->shared_grads, dx_out, dx_in, loss_scale);
    backward_weight(s, &s->slots[slot], &s->shared_grads);
    s->slots[slot].state = GT_SLOT_FREE;
cleanup:
    return rc;
}

int gt_stage_backward_input(gt_stage *s, int slot, const float *dx_out, float *dx_in,
                            float loss_scale) {
    int rc = GT_OK;
    gt_grad_acts *fresh = NULL;
    GT_CHECK(check_slot(s, slot, GT_SLOT_FORWARD_DONE, "gt_stage_backward_input"));
    GT_CHECK(check_backward_args(s, dx_out, dx_in, "gt_stage_backward_input"));
    if (s->slot_grads[slot] == NULL) {
        GT_CALLOC(fresh, 1);
        GT_CHECK(grads_alloc(s, fresh));
        s->slot_grads[slot] = fresh;
        fresh = NULL;
    }
    backward_input(s, &s->slots[slot], s->slot_grads[slot], dx_out, dx_in, loss_scale);
    s->slots[slot].state = GT_SLOT_INPUT_GRAD_DONE;
cleanup:
    if (fresh != NULL) grads_release(fresh);
    free(fresh);
    return rc;
}

int gt_stage_backward_weight(gt_stage *s, int slot) {
    int rc = GT_OK;
    GT_CHECK(check_slot(s, slot, GT_SLOT_INPUT_GRAD_DONE, "gt_stage_backward_weight"));
    backward_weight(s, &s->slots[slot], s->slot_grads[slot]);
    s->slots[slot].state = GT_SLOT_FREE;
cleanup:
    return rc;
}
