/*
 * stage_cuda.c — the CUDA backend's gt_stage: creation (tensor table, device buffers, AdamW
 * segments, attention choice), free, accessors, the backend functions of stage.h (API v2) and
 * the optimizer (zero grad, gradient sum of squares, AdamW, clip coefficient, LR schedule).
 *
 * The tensor table and validation follow stage.c exactly (same names, order and offsets), so
 * checkpoints and the executor's wte range are identical across backends.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "cuda/cuda_check.h"
#include "cuda/stage_cuda.h"

#define GT_NAME_MAX 64
#define GT_LT_WORKSPACE (32u << 20)

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

/* AdamW segments: maximal runs of consecutive tensors with the same decay flag. */
static int build_segments(gt_stage *s) {
    int rc = GT_OK;
    uint64_t *ends = NULL;
    uint8_t *decay = NULL;
    int n = 0;
    GT_CALLOC(ends, s->num_tensors);
    GT_CALLOC(decay, s->num_tensors);
    for (int i = 0; i < s->num_tensors; i++) {
        const gt_tensor_info *t = &s->tensors[i];
        if (n > 0 && decay[n - 1] == (uint8_t)t->decay) {
            ends[n - 1] = t->offset + t->numel;
        } else {
            ends[n] = t->offset + t->numel;
            decay[n] = (uint8_t)t->decay;
            n++;
        }
    }
    s->n_segments = n;
    CUDA_MALLOC(s->seg_end, (size_t)n * sizeof(uint64_t));
    CUDA_MALLOC(s->seg_decay, (size_t)n);
    CUDA_CHECK(cudaMemcpy(s->seg_end, ends, (size_t)n * sizeof(uint64_t), cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaMemcpy(s->seg_decay, decay, (size_t)n, cudaMemcpyHostToDevice));
cleanup:
    free(ends);
    free(decay);
    return rc;
}

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
    if (cfg->n_embd % 8 != 0)
        GT_INPUT_FAIL("stage config: n_embd (%d) must be a multiple of 8 on the cuda backend "
                      "(16-byte aligned bf16 rows for cuBLASLt)", cfg->n_embd);
    if (cfg->vocab_size % 8 != 0)
        GT_INPUT_FAIL("stage config: vocab_size (%d) must be a multiple of 8 on the cuda backend "
                      "(pad it, e.g. 50257 -> 50304)", cfg->vocab_size);
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

/* cuDNN flash attention unless GANTRY_ATTENTION=reference, the build lacks it or cuDNN
 * rejects the shape (then the reason is kept in the info line). */
static int choose_attention(gt_stage *s, char *why, size_t why_len) {
    int rc = GT_OK;
    const char *env = getenv("GANTRY_ATTENTION");
    why[0] = '\0';
#ifdef GANTRY_HAVE_CUDNN
    if (env != NULL && strcmp(env, "reference") != 0 && strcmp(env, "cudnn") != 0)
        GT_INPUT_FAIL("GANTRY_ATTENTION='%s' is not allowed (allowed: cudnn, reference)", env);
    if (env == NULL || strcmp(env, "cudnn") == 0) {
        int hs = s->cfg.n_embd / s->cfg.n_head;
        if (gt_cudnn_attn_create(&s->cudnn, why, why_len) != 0) {
            s->cudnn = NULL;
        } else if (!gt_cudnn_attn_supported(s->cudnn, s->B, s->T, s->cfg.n_head, hs, why,
                                            why_len)) {
            gt_cudnn_attn_destroy(s->cudnn);
            s->cudnn = NULL;
            if (env != NULL) GT_FAIL(GT_ESTATE, "GANTRY_ATTENTION=cudnn: %s", why);
        }
    }
#else
    if (env != NULL && strcmp(env, "reference") != 0)
        GT_INPUT_FAIL("GANTRY_ATTENTION='%s' is not allowed in this build (allowed: reference; "
                      "cudnn needs GANTRY_CUDNN=ON)", env);
    snprintf(why, why_len, "built without cuDNN");
#endif
cleanup:
    return rc;
}

int gt_stage_create(const gt_config *cfg, int layer_begin, int layer_end, int is_first,
                    int is_last, int B, int T, int n_slots, gt_stage **out) {
    int rc = GT_OK;
    gt_stage *s = NULL;
    char why[256];
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
    s->stream = 0;
    s->gelu_fused = s->dgelu_fused = 1;
    GT_CHECK(build_tensor_table(s));
    for (int i = 0; i < 4; i++) {
        CUDA_MALLOC(s->buffers[i], s->num_params * sizeof(float));
        CUDA_CHECK(cudaMemset(s->buffers[i], 0, s->num_params * sizeof(float)));
    }
    CUDA_MALLOC(s->params16, s->num_params * sizeof(gt_bf16));
    CUDA_CHECK(cudaMemset(s->params16, 0, s->num_params * sizeof(gt_bf16)));
    GT_CHECK(build_segments(s));
    GT_CHECK(gt_lt_create(&s->lt, GT_LT_WORKSPACE));
    GT_CHECK(choose_attention(s, why, sizeof(why)));
    {
        size_t N = (size_t)B * T, C = (size_t)cfg->n_embd;
        CUDA_MALLOC(s->datty, N * C * sizeof(gt_bf16));
        CUDA_MALLOC(s->colsum, (size_t)2 * GT_CU_COLSUM_CHUNKS * 4 * C * sizeof(float));
        CUDA_MALLOC(s->sq, (size_t)(1 + GT_CU_SQ_BLOCKS) * sizeof(double));
        CUDA_MALLOC(s->loss, sizeof(float));
        CUDA_CHECK(cudaMallocHost((void **)&s->host_loss, sizeof(float)));
        CUDA_CHECK(cudaMallocHost((void **)&s->host_sq, sizeof(double)));
        if (s->cudnn == NULL && s->nl > 0) {
            size_t scores = (size_t)B * cfg->n_head * T * T;
            CUDA_MALLOC(s->ref_qkv, 4 * N * C * sizeof(gt_bf16));
            CUDA_MALLOC(s->ref_scores, 2 * scores * sizeof(gt_bf16));
        }
    }
    GT_CALLOC(s->slots, n_slots);
    for (int i = 0; i < n_slots; i++) GT_CHECK(gt_cu_alloc_slot(s, &s->slots[i]));
    GT_CHECK(gt_cu_alloc_grads(s, &s->shared_grads, 0));
    GT_CALLOC(s->slot_grads, n_slots);
    snprintf(s->info, sizeof(s->info), "cuda attention=%s%s%s", s->cudnn ? "cudnn" : "reference",
             s->cudnn || why[0] == '\0' ? "" : " reason=", s->cudnn ? "" : why);
    *out = s;
    s = NULL;
cleanup:
    gt_stage_free(s);
    return rc;
}

void gt_stage_free(gt_stage *s) {
    if (s == NULL) return;
    cudaDeviceSynchronize();
    if (s->slots != NULL)
        for (int i = 0; i < s->n_slots; i++) gt_cu_release_slot(&s->slots[i]);
    if (s->slot_grads != NULL)
        for (int i = 0; i < s->n_slots; i++) {
            if (s->slot_grads[i] != NULL) gt_cu_release_grads(s->slot_grads[i]);
            free(s->slot_grads[i]);
        }
    gt_cu_release_grads(&s->shared_grads);
    free(s->slot_grads);
    free(s->slots);
    for (int i = 0; i < 4; i++) cudaFree(s->buffers[i]);
    cudaFree(s->params16);
    cudaFree(s->seg_end);
    cudaFree(s->seg_decay);
    cudaFree(s->datty);
    cudaFree(s->colsum);
    cudaFree(s->sq);
    cudaFree(s->loss);
    cudaFreeHost(s->host_loss);
    cudaFreeHost(s->host_sq);
    cudaFree(s->ref_qkv);
    cudaFree(s->ref_scores);
#ifdef GANTRY_HAVE_CUDNN
    gt_cudnn_attn_destroy(s->cudnn);
#endif
    gt_lt_destroy(&s->lt);
    free(s->tensors);
    free(s->names);
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
/* backend functions (stage.h, API version 2)                                                  */

const char *gt_backend_name(void) { return "cuda"; }

const char *gt_stage_backend_info(const gt_stage *s) { return s ? s->info : "cuda"; }

int gt_stage_activation_dtype(const gt_stage *s) {
    (void)s;
    return GT_DTYPE_BF16;
}

size_t gt_stage_activation_bytes(const gt_stage *s) {
    return s ? (size_t)s->B * (size_t)s->T * (size_t)s->cfg.n_embd * sizeof(gt_bf16) : 0;
}

int gt_stage_alloc_activation(const gt_stage *s, void **out) {
    int rc = GT_OK;
    void *p = NULL;
    if (s == NULL || out == NULL) GT_INPUT_FAIL("gt_stage_alloc_activation: NULL argument");
    *out = NULL;
    CUDA_MALLOC(p, gt_stage_activation_bytes(s));
    CUDA_CHECK(cudaMemset(p, 0, gt_stage_activation_bytes(s)));
    *out = p;
    p = NULL;
cleanup:
    if (p != NULL) cudaFree(p);
    return rc;
}

void gt_stage_free_activation(const gt_stage *s, void *ptr) {
    (void)s;
    if (ptr != NULL) cudaFree(ptr);
}

int gt_stage_set_stream(gt_stage *s, void *stream) {
    int rc = GT_OK;
    if (s == NULL) GT_INPUT_FAIL("gt_stage_set_stream: stage is NULL");
    s->stream = (cudaStream_t)stream;
cleanup:
    return rc;
}

int gt_backend_memory(size_t *used_bytes, size_t *total_bytes) {
    int rc = GT_OK;
    size_t free_bytes = 0, total = 0;
    if (used_bytes == NULL || total_bytes == NULL)
        GT_INPUT_FAIL("gt_backend_memory: NULL argument");
    CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total));
    *used_bytes = total - free_bytes;
    *total_bytes = total;
cleanup:
    return rc;
}

int gt_stage_synchronize(gt_stage *s) {
    int rc = GT_OK;
    if (s == NULL) GT_INPUT_FAIL("gt_stage_synchronize: stage is NULL");
    CUDA_CHECK(cudaStreamSynchronize(s->stream));
cleanup:
    return rc;
}

static int check_range(const gt_stage *s, gt_buffer which, size_t offset, size_t count,
                       const void *host, const char *fn) {
    int rc = GT_OK;
    if (s == NULL || host == NULL) GT_INPUT_FAIL("%s: stage or host pointer is NULL", fn);
    if ((int)which < 0 || (int)which > 3) GT_INPUT_FAIL("%s: bad buffer %d", fn, (int)which);
    if (offset > s->num_params || count > s->num_params - offset)
        GT_INPUT_FAIL("%s: range [%zu, %zu) is outside the buffer of %zu elements", fn, offset,
                      offset + count, s->num_params);
cleanup:
    return rc;
}

int gt_stage_read_buffer(gt_stage *s, gt_buffer which, size_t offset, size_t count,
                         float *host_dst) {
    int rc = GT_OK;
    GT_CHECK(check_range(s, which, offset, count, host_dst, "gt_stage_read_buffer"));
    CUDA_CHECK(cudaMemcpyAsync(host_dst, s->buffers[which] + offset, count * sizeof(float),
                               cudaMemcpyDeviceToHost, s->stream));
    CUDA_CHECK(cudaStreamSynchronize(s->stream));
cleanup:
    return rc;
}

int gt_stage_write_buffer(gt_stage *s, gt_buffer which, size_t offset, size_t count,
                          const float *host_src) {
    int rc = GT_OK;
    GT_CHECK(check_range(s, which, offset, count, host_src, "gt_stage_write_buffer"));
    CUDA_CHECK(cudaMemcpyAsync(s->buffers[which] + offset, host_src, count * sizeof(float),
                               cudaMemcpyHostToDevice, s->stream));
    if (which == GT_BUF_PARAMS)
        CUDA_CHECK(gt_cu_f32_to_bf16(s->params16 + offset, s->buffers[which] + offset, count,
                                     s->stream));
    CUDA_CHECK(cudaStreamSynchronize(s->stream));
cleanup:
    return rc;
}

int gt_stage_params_updated(gt_stage *s) {
    int rc = GT_OK;
    if (s == NULL) GT_INPUT_FAIL("gt_stage_params_updated: stage is NULL");
    CUDA_CHECK(gt_cu_f32_to_bf16(s->params16, s->buffers[GT_BUF_PARAMS], s->num_params,
                                 s->stream));
cleanup:
    return rc;
}

/* ------------------------------------------------------------------------------------------ */
/* optimizer                                                                                   */

int gt_stage_zero_grad(gt_stage *s) {
    int rc = GT_OK;
    if (s == NULL) GT_INPUT_FAIL("gt_stage_zero_grad: stage is NULL");
    CUDA_CHECK(cudaMemsetAsync(s->buffers[GT_BUF_GRADS], 0, s->num_params * sizeof(float),
                               s->stream));
cleanup:
    return rc;
}

int gt_stage_grad_sq_sum(const gt_stage *s, int include_wte, double *out) {
    int rc = GT_OK;
    if (s == NULL || out == NULL) GT_INPUT_FAIL("gt_stage_grad_sq_sum: stage or out is NULL");
    size_t begin = (s->has_wte && !include_wte) ? s->tensors[0].numel : 0;
    CUDA_CHECK(gt_cu_sq_sum(s->sq, s->sq + 1, s->buffers[GT_BUF_GRADS] + begin,
                            s->num_params - begin, s->stream));
    CUDA_CHECK(cudaMemcpyAsync(s->host_sq, s->sq, sizeof(double), cudaMemcpyDeviceToHost,
                               s->stream));
    CUDA_CHECK(cudaStreamSynchronize(s->stream));
    *out = *s->host_sq;
cleanup:
    return rc;
}

int gt_stage_adamw_step(gt_stage *s, float lr, float beta1, float beta2, float eps,
                        float weight_decay, int step_t, float grad_scale) {
    int rc = GT_OK;
    if (s == NULL) GT_INPUT_FAIL("gt_stage_adamw_step: stage is NULL");
    if (step_t < 1) GT_INPUT_FAIL("gt_stage_adamw_step: step_t=%d (must be >= 1)", step_t);
    {
        /* as torch: bias corrections in double, applied as fp32 scalars (see optim.c) */
        double bias_correction1 = 1.0 - pow((double)beta1, step_t);
        double bias_correction2 = 1.0 - pow((double)beta2, step_t);
        gt_cu_adamw_args a;
        a.lr = lr;
        a.beta1 = beta1;
        a.beta2 = beta2;
        a.eps = eps;
        a.weight_decay = weight_decay;
        a.grad_scale = grad_scale;
        a.step_size = (float)((double)lr / bias_correction1);
        a.bc2_sqrt = (float)sqrt(bias_correction2);
        a.one_minus_beta1 = (float)(1.0 - (double)beta1);
        a.one_minus_beta2 = (float)(1.0 - (double)beta2);
        CUDA_CHECK(gt_cu_adamw(s->buffers[GT_BUF_PARAMS], s->params16, s->buffers[GT_BUF_GRADS],
                               s->buffers[GT_BUF_ADAM_M], s->buffers[GT_BUF_ADAM_V],
                               s->num_params, s->seg_end, s->seg_decay, s->n_segments, a,
                               s->stream));
    }
cleanup:
    return rc;
}

/* Same formulas as optim.c (the CPU build's copy). */
float gt_clip_coef(double total_norm, double max_norm) {
    double coef = max_norm / (total_norm + 1e-6);
    return (float)(coef < 1.0 ? coef : 1.0);
}

double gt_lr_at(gt_lr_kind kind, int step, double max_lr, double min_lr, int warmup_steps,
                int total_steps) {
    if (step < warmup_steps) return max_lr * (double)(step + 1) / (double)warmup_steps;
    if (kind == GT_LR_CONSTANT) return max_lr;
    int decay_steps = total_steps - warmup_steps;
    double ratio = decay_steps > 0 ? (double)(step - warmup_steps) / (double)decay_steps : 1.0;
    if (ratio < 0.0) ratio = 0.0;
    if (ratio > 1.0) ratio = 1.0;
    double coeff = 0.5 * (1.0 + cos(M_PI * ratio));
    return min_lr + coeff * (max_lr - min_lr);
}
