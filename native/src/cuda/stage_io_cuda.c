/*
 * stage_io_cuda.c — safetensors load/save of a CUDA stage: the same names, checks and
 * all-or-nothing rule as stage_io.c (whose helpers are copied here: they are static there),
 * with the data staged in host memory and copied to / from the device buffers.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "cuda/cuda_check.h"
#include "cuda/stage_cuda.h"
#include "safetensors.h"

static const char *const gt_known_layer_suffixes[] = {
    "ln_1.weight", "ln_1.bias", "attn.c_attn.weight", "attn.c_attn.bias",
    "attn.c_proj.weight", "attn.c_proj.bias", "ln_2.weight", "ln_2.bias",
    "mlp.c_fc.weight", "mlp.c_fc.bias", "mlp.c_proj.weight", "mlp.c_proj.bias",
    "attn.bias", "attn.masked_bias" /* HF mask buffers: accepted and ignored */};

/* 1 if `name` is a tensor of a GPT-2 model with n_layer blocks (HF naming, prefix optional). */
static int is_gpt2_name(const char *name, int n_layer) {
    if (strcmp(name, "lm_head.weight") == 0) return 1;
    if (strncmp(name, "transformer.", 12) == 0) name += 12;
    if (strcmp(name, "wte.weight") == 0 || strcmp(name, "wpe.weight") == 0 ||
        strcmp(name, "ln_f.weight") == 0 || strcmp(name, "ln_f.bias") == 0)
        return 1;
    if (strncmp(name, "h.", 2) != 0) return 0;
    const char *p = name + 2;
    if (*p < '0' || *p > '9') return 0;
    if (p[0] == '0' && p[1] >= '0' && p[1] <= '9') return 0; /* no leading zeros */
    long layer = 0;
    while (*p >= '0' && *p <= '9') {
        layer = layer * 10 + (*p - '0');
        if (layer >= n_layer) return 0;
        p++;
    }
    if (*p != '.') return 0;
    p++;
    for (size_t i = 0; i < sizeof(gt_known_layer_suffixes) / sizeof(gt_known_layer_suffixes[0]);
         i++)
        if (strcmp(p, gt_known_layer_suffixes[i]) == 0) return 1;
    return 0;
}

/* Finds the file's entry for a stage tensor, trying HF's name variants. */
static const gt_st_entry *find_entry(const gt_st_file *f, const char *name) {
    const gt_st_entry *e = gt_st_find(f, name);
    if (e != NULL) return e;
    if (strcmp(name, "lm_head.weight") == 0) {
        e = gt_st_find(f, "transformer.wte.weight");
        return e != NULL ? e : gt_st_find(f, "wte.weight");
    }
    if (strncmp(name, "transformer.", 12) == 0) return gt_st_find(f, name + 12);
    return NULL;
}

static void format_shape(char *out, size_t cap, int ndim, const int64_t *shape) {
    size_t used = (size_t)snprintf(out, cap, "[");
    for (int d = 0; d < ndim && used < cap; d++)
        used += (size_t)snprintf(out + used, cap - used, "%s%lld", d ? ", " : "",
                                 (long long)shape[d]);
    if (used < cap) snprintf(out + used, cap - used, "]");
}

int gt_stage_load(gt_stage *s, const char *path, gt_buffer which) {
    int rc = GT_OK;
    gt_st_file f = {0};
    float *staging = NULL;
    if (s == NULL || path == NULL) GT_INPUT_FAIL("gt_stage_load: stage or path is NULL");
    if ((int)which < 0 || (int)which > 3) GT_INPUT_FAIL("gt_stage_load: bad buffer %d", which);
    GT_CHECK(gt_st_open(path, &f));
    for (int i = 0; i < f.num_entries; i++)
        if (!is_gpt2_name(f.entries[i].name, s->cfg.n_layer))
            GT_INPUT_FAIL("%s: unexpected tensor '%s' (not a Hugging Face GPT-2 tensor name of a "
                          "model with n_layer=%d)", path, f.entries[i].name, s->cfg.n_layer);
    GT_CALLOC(staging, s->num_params);
    for (int i = 0; i < s->num_tensors; i++) {
        const gt_tensor_info *t = &s->tensors[i];
        const gt_st_entry *e = find_entry(&f, t->name);
        char want[96], got[96];
        format_shape(want, sizeof(want), t->ndim, t->shape);
        if (e == NULL) GT_INPUT_FAIL("%s: missing tensor '%s' (shape %s)", path, t->name, want);
        if (strcmp(e->dtype, "F32") != 0)
            GT_INPUT_FAIL("%s: tensor '%s' has dtype %s (expected F32)", path, e->name, e->dtype);
        int same = e->ndim == t->ndim;
        for (int d = 0; same && d < t->ndim; d++) same = e->shape[d] == t->shape[d];
        if (!same) {
            format_shape(got, sizeof(got), e->ndim, e->shape);
            GT_INPUT_FAIL("%s: tensor '%s' has shape %s (expected %s)", path, e->name, got, want);
        }
        GT_CHECK(gt_st_read(&f, e, staging + t->offset));
    }
    GT_CHECK(gt_stage_write_buffer(s, which, 0, s->num_params, staging));
cleanup:
    free(staging);
    gt_st_close(&f);
    return rc;
}

int gt_stage_save(const gt_stage *s, const char *path, gt_buffer which) {
    int rc = GT_OK;
    float *staging = NULL;
    if (s == NULL || path == NULL) GT_INPUT_FAIL("gt_stage_save: stage or path is NULL");
    if ((int)which < 0 || (int)which > 3) GT_INPUT_FAIL("gt_stage_save: bad buffer %d", which);
    GT_CALLOC(staging, s->num_params);
    CUDA_CHECK(cudaStreamSynchronize(s->stream));
    CUDA_CHECK(cudaMemcpy(staging, s->buffers[which], s->num_params * sizeof(float),
                          cudaMemcpyDeviceToHost));
    GT_CHECK(gt_st_write_f32(path, s->tensors, s->num_tensors, staging));
cleanup:
    free(staging);
    return rc;
}
