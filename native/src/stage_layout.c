/*
 * stage_layout.c — a stage's backend-independent description (stage_layout.h): validation of
 * the model configuration and of the stage's place in it, the tensor table in buffer order and
 * the stage.h accessors that read only the table. Used by the CPU and the CUDA builds alike.
 */
#include <stdio.h>
#include <stdlib.h>

#include "common.h"
#include "stage_layout.h"

#define GT_NAME_MAX 64

static const char *const gt_layer_tensor_names[GT_TENSORS_PER_LAYER] = {
    "ln_1.weight", "ln_1.bias", "attn.c_attn.weight", "attn.c_attn.bias",
    "attn.c_proj.weight", "attn.c_proj.bias", "ln_2.weight", "ln_2.bias",
    "mlp.c_fc.weight", "mlp.c_fc.bias", "mlp.c_proj.weight", "mlp.c_proj.bias"};

/* ------------------------------------------------------------------------------------------ */
/* validation                                                                                  */

int gt_stage_check_config(const gt_config *cfg) {
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
cleanup:
    return rc;
}

int gt_stage_check_placement(const gt_config *cfg, int layer_begin, int layer_end, int is_first,
                             int is_last, int B, int T, int n_slots) {
    int rc = GT_OK;
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

/* ------------------------------------------------------------------------------------------ */
/* tensor table                                                                                */

static void add_tensor(gt_stage_layout *L, const char *name, int ndim, int64_t d0, int64_t d1) {
    gt_tensor_info *t = &L->tensors[L->num_tensors];
    char *storage = L->names + (size_t)L->num_tensors * GT_NAME_MAX;
    snprintf(storage, GT_NAME_MAX, "%s", name);
    t->name = storage;
    t->ndim = ndim;
    t->shape[0] = d0;
    t->shape[1] = ndim == 2 ? d1 : 0;
    t->numel = (size_t)d0 * (size_t)(ndim == 2 ? d1 : 1);
    t->offset = L->num_params;
    t->decay = ndim == 2;
    L->num_params += t->numel;
    L->num_tensors++;
}

static int build_tensor_table(gt_stage_layout *L) {
    int rc = GT_OK;
    int64_t V = L->cfg.vocab_size, C = L->cfg.n_embd, maxT = L->cfg.max_seq_len;
    int count = L->has_wte + L->has_wpe + L->nl * GT_TENSORS_PER_LAYER + (L->is_last ? 2 : 0);
    GT_CALLOC(L->tensors, count);
    GT_CALLOC(L->names, (size_t)count * GT_NAME_MAX);
    if (L->has_wte)
        add_tensor(L, L->is_first ? "transformer.wte.weight" : "lm_head.weight", 2, V, C);
    if (L->has_wpe) add_tensor(L, "transformer.wpe.weight", 2, maxT, C);
    L->layer_tensor0 = L->num_tensors;
    for (int l = 0; l < L->nl; l++) {
        /* shapes in Conv1D layout (in, out) for the 2-D tensors */
        const int64_t shapes[GT_TENSORS_PER_LAYER][2] = {
            {C, 0}, {C, 0}, {C, 3 * C}, {3 * C, 0}, {C, C}, {C, 0},
            {C, 0}, {C, 0}, {C, 4 * C}, {4 * C, 0}, {4 * C, C}, {C, 0}};
        for (int k = 0; k < GT_TENSORS_PER_LAYER; k++) {
            char name[GT_NAME_MAX];
            snprintf(name, sizeof(name), "transformer.h.%d.%s", L->layer_begin + l,
                     gt_layer_tensor_names[k]);
            add_tensor(L, name, shapes[k][1] ? 2 : 1, shapes[k][0], shapes[k][1]);
        }
    }
    if (L->is_last) {
        add_tensor(L, "transformer.ln_f.weight", 1, C, 0);
        add_tensor(L, "transformer.ln_f.bias", 1, C, 0);
    }
cleanup:
    return rc;
}

int gt_stage_layout_init(gt_stage_layout *L, const gt_config *cfg, int layer_begin,
                         int layer_end, int is_first, int is_last, int B, int T, int n_slots) {
    L->cfg = *cfg;
    L->layer_begin = layer_begin;
    L->layer_end = layer_end;
    L->nl = layer_end - layer_begin;
    L->is_first = is_first != 0;
    L->is_last = is_last != 0;
    L->has_wte = L->is_first || L->is_last;
    L->has_wpe = L->is_first;
    L->B = B;
    L->T = T;
    L->n_slots = n_slots;
    return build_tensor_table(L);
}

void gt_stage_layout_release(gt_stage_layout *L) {
    free(L->tensors);
    free(L->names);
    L->tensors = NULL;
    L->names = NULL;
}

/* ------------------------------------------------------------------------------------------ */
/* accessors of stage.h                                                                        */

size_t gt_stage_num_params(const gt_stage *s) {
    return s ? gt_stage_layout_of(s)->num_params : 0;
}

int gt_stage_wte_range(const gt_stage *s, size_t *offset, size_t *count) {
    const gt_stage_layout *L = gt_stage_layout_of(s);
    int has = L != NULL && L->has_wte;
    if (offset) *offset = has ? L->tensors[0].offset : 0;
    if (count) *count = has ? L->tensors[0].numel : 0;
    return has;
}

int gt_stage_num_tensors(const gt_stage *s) { return s ? gt_stage_layout_of(s)->num_tensors : 0; }

const gt_tensor_info *gt_stage_tensor(const gt_stage *s, int i) {
    const gt_stage_layout *L = gt_stage_layout_of(s);
    if (L == NULL || i < 0 || i >= L->num_tensors) return NULL;
    return &L->tensors[i];
}

/* ------------------------------------------------------------------------------------------ */
/* gradients-ready hook                                                                        */

int gt_stage_set_grad_ready(gt_stage *s, gt_grad_ready_fn fn, void *ctx) {
    int rc = GT_OK;
    if (s == NULL) GT_INPUT_FAIL("gt_stage_set_grad_ready: stage is NULL");
    {
        gt_stage_layout *L = (gt_stage_layout *)(void *)s;
        L->grad_ready = fn;
        L->grad_ready_ctx = fn != NULL ? ctx : NULL;
    }
cleanup:
    return rc;
}

static int report(const gt_stage_layout *L, size_t offset, size_t count) {
    return L->grad_ready(L->grad_ready_ctx, offset, count);
}

int gt_stage_report_head(const gt_stage_layout *L) {
    int rc = GT_OK;
    if (L->grad_ready == NULL || !L->is_last) return GT_OK;
    if (!L->is_first) GT_CHECK(report(L, L->tensors[0].offset, L->tensors[0].numel));
    {
        const gt_tensor_info *lnf_w = &L->tensors[L->num_tensors - 2];
        GT_CHECK(report(L, lnf_w->offset, L->num_params - lnf_w->offset)); /* ln_f w, b */
    }
cleanup:
    return rc;
}

int gt_stage_report_layer(const gt_stage_layout *L, int l) {
    if (L->grad_ready == NULL) return GT_OK;
    const gt_tensor_info *first = &L->tensors[L->layer_tensor0 + l * GT_TENSORS_PER_LAYER];
    const gt_tensor_info *last = first + GT_TENSORS_PER_LAYER - 1;
    return report(L, first->offset, last->offset + last->numel - first->offset);
}

int gt_stage_report_embeddings(const gt_stage_layout *L) {
    if (L->grad_ready == NULL || !L->is_first) return GT_OK;
    const gt_tensor_info *wpe = &L->tensors[1]; /* a first stage: wte (0), wpe (1) */
    return report(L, L->tensors[0].offset, wpe->offset + wpe->numel - L->tensors[0].offset);
}
