/*
 * stage_cuda.c — the CUDA backend's gt_stage: creation (device buffers, AdamW segments,
 * attention choice), free, the backend functions of stage.h (API v2), gt_stage_save and the
 * optimizer (zero grad, gradient sum of squares, AdamW).
 *
 * The tensor table, validation, accessors, argument checks, the slot lifecycle, gt_stage_load
 * and the optimizer's scalar math are shared with the CPU build (stage_layout.c,
 * stage_checks.c, stage_slots.c, stage_io.c, optim_common.c), so checkpoints and the
 * executor's wte range are identical across backends.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "cuda/cuda_check.h"
#include "cuda/stage_cuda.h"
#include "optim_common.h"
#include "runtime_config.h"
#include "safetensors.h"
#include "stage_checks.h"
#include "stage_slots.h"

#define GT_LT_WORKSPACE (32u << 20)

/* AdamW segments: maximal runs of consecutive tensors with the same decay flag. */
static int build_segments(gt_stage *s) {
    int rc = GT_OK;
    uint64_t *ends = NULL;
    uint8_t *decay = NULL;
    int n = 0;
    GT_CALLOC(ends, s->layout.num_tensors);
    GT_CALLOC(decay, s->layout.num_tensors);
    for (int i = 0; i < s->layout.num_tensors; i++) {
        const gt_tensor_info *t = &s->layout.tensors[i];
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

/* The CUDA kernels' limits beyond gt_stage_check_config (any vocabulary: the logits are padded
 * inside, see stage_cuda.h). */
static int check_cuda_config(const gt_config *cfg) {
    int rc = GT_OK;
    if (cfg->n_embd % 8 != 0)
        GT_INPUT_FAIL("stage config: n_embd (%d) must be a multiple of 8 on the cuda backend "
                      "(16-byte aligned bf16 rows for cuBLASLt)", cfg->n_embd);
    if (cfg->vocab_size > INT32_MAX - GT_CU_LOGITS_PAD)
        GT_INPUT_FAIL("stage config: vocab_size (%d) is too large for the cuda backend",
                      cfg->vocab_size);
cleanup:
    return rc;
}

/* cuDNN flash attention unless GANTRY_ATTENTION=reference, the build lacks it or cuDNN
 * rejects the shape (then the reason is kept in the info line); GANTRY_ATTENTION=cudnn fails
 * instead of falling back. */
static int choose_attention(gt_stage *s, char *why, size_t why_len) {
    int rc = GT_OK;
    const int choice = s->env.attention;
    why[0] = '\0';
#ifdef GANTRY_HAVE_CUDNN
    if (choice != GT_ATTENTION_REFERENCE) {
        int hs = s->layout.cfg.n_embd / s->layout.cfg.n_head;
        if (gt_cudnn_attn_create(&s->cudnn, s->env.attn_autotune, why, why_len) != 0) {
            s->cudnn = NULL;
        } else if (!gt_cudnn_attn_supported(s->cudnn, s->layout.B, s->layout.T,
                                            s->layout.cfg.n_head, hs, why, why_len)) {
            gt_cudnn_attn_destroy(s->cudnn);
            s->cudnn = NULL;
            if (choice == GT_ATTENTION_CUDNN)
                GT_FAIL(GT_ESTATE, "GANTRY_ATTENTION=cudnn: %s", why);
        }
    }
#else
    (void)s;
    if (choice == GT_ATTENTION_CUDNN)
        GT_INPUT_FAIL("GANTRY_ATTENTION='cudnn' is not allowed in this build (allowed: auto, "
                      "reference; cudnn needs GANTRY_CUDNN=ON)");
    snprintf(why, why_len, "built without cuDNN");
#endif
cleanup:
    return rc;
}

/* The kernel and product knobs of the stage's switches (runtime_config.h): the kernel
 * variants the compute hooks choose between and cuBLASLt's tuning. */
static void set_kernel_knobs(gt_stage *s) {
    s->ln_bias_sums = s->env.ln_bias_sums;
    s->bias_in_gemm = s->env.bias_gemm;
    s->ce_fused = s->env.ce_fused;
    s->grad_overwrite = s->env.grad_overwrite;
    s->resid_ln = s->env.resid_ln;
    s->lt.autotune = s->env.gemm_autotune;
    s->lt.candidates = s->env.gemm_candidates;
    s->lt.tune_log = s->env.gemm_tune_log;
}

int gt_stage_create(const gt_config *cfg, int layer_begin, int layer_end, int is_first,
                    int is_last, int B, int T, int n_slots, gt_stage **out) {
    int rc = GT_OK;
    gt_stage *s = NULL;
    char why[256];
    if (out == NULL) GT_INPUT_FAIL("gt_stage_create: out is NULL");
    *out = NULL;
    GT_CHECK(gt_stage_check_config(cfg));
    GT_CHECK(check_cuda_config(cfg));
    GT_CHECK(gt_stage_check_placement(cfg, layer_begin, layer_end, is_first, is_last, B, T,
                                      n_slots));
    GT_CALLOC(s, 1);
    GT_CHECK(gt_stage_layout_init(&s->layout, cfg, layer_begin, layer_end, is_first, is_last, B,
                                  T, n_slots));
    GT_CHECK(gt_runtime_config_read(&s->env));
    CUDA_CHECK(gt_cu_kernels_init());
    s->stream = 0;
    s->gelu_fused = s->dgelu_fused = 1;
    gt_prof_init(&s->prof, s->env.profile_ops);
    s->graphs_enabled = s->env.cuda_graphs && !s->prof.enabled; /* marks need eager launches */
    for (int i = 0; i < 4; i++) {
        CUDA_MALLOC(s->buffers[i], s->layout.num_params * sizeof(float));
        CUDA_CHECK(cudaMemset(s->buffers[i], 0, s->layout.num_params * sizeof(float)));
    }
    CUDA_MALLOC(s->params16, s->layout.num_params * sizeof(gt_bf16));
    CUDA_CHECK(cudaMemset(s->params16, 0, s->layout.num_params * sizeof(gt_bf16)));
    GT_CHECK(build_segments(s));
    GT_CHECK(gt_cu_grads_plan(s));
    GT_CHECK(gt_lt_create(&s->lt, GT_LT_WORKSPACE));
    set_kernel_knobs(s);
    GT_CHECK(choose_attention(s, why, sizeof(why)));
    {
        size_t N = (size_t)B * T, C = (size_t)cfg->n_embd;
        CUDA_MALLOC(s->datty, N * C * sizeof(gt_bf16));
        if (s->resid_ln) CUDA_MALLOC(s->proj, N * C * sizeof(gt_bf16));
        /* the column sums of up to 4C columns and the LayerNorm weight sums' fallback (two
         * partial vectors each at most), or the one-pass LayerNorm backward's partials */
        size_t colsum_floats = (size_t)2 * GT_CU_COLSUM_CHUNKS * 4 * C;
        if (colsum_floats < GT_CU_LN_BWD_SCRATCH(C)) colsum_floats = GT_CU_LN_BWD_SCRATCH(C);
        CUDA_MALLOC(s->colsum, colsum_floats * sizeof(float));
        CUDA_MALLOC(s->sq, (size_t)(1 + GT_CU_SQ_BLOCKS) * sizeof(double));
        CUDA_MALLOC(s->loss, sizeof(float));
        CUDA_CHECK(cudaMallocHost((void **)&s->host_loss, sizeof(float)));
        CUDA_CHECK(cudaMallocHost((void **)&s->host_sq, sizeof(double)));
        GT_CALLOC(s->group_count, (size_t)cfg->vocab_size + 1);
        if (s->cudnn == NULL && s->layout.nl > 0) {
            size_t scores = (size_t)B * cfg->n_head * T * T;
            CUDA_MALLOC(s->ref_qkv, 4 * N * C * sizeof(gt_bf16));
            CUDA_MALLOC(s->ref_scores, 2 * scores * sizeof(gt_bf16));
        }
    }
    GT_CHECK(gt_stage_slots_init(&s->layout));
    GT_CALLOC(s->slots, n_slots);
    for (int i = 0; i < n_slots; i++) GT_CHECK(gt_cu_alloc_slot(s, &s->slots[i]));
    GT_CHECK(gt_cu_alloc_grads(s, &s->shared_grads, 0));
    {
        char version[32] = "";
#ifdef GANTRY_HAVE_CUDNN
        if (s->cudnn) snprintf(version, sizeof(version), " (cuDNN %zu)", gt_cudnn_version());
#endif
        snprintf(s->info, sizeof(s->info), "cuda attention=%s%s%s%s",
                 s->cudnn ? "cudnn" : "reference", version,
                 s->cudnn || why[0] == '\0' ? "" : " reason=", s->cudnn ? "" : why);
    }
    *out = s;
    s = NULL;
cleanup:
    gt_stage_free(s);
    return rc;
}

void gt_stage_free(gt_stage *s) {
    if (s == NULL) return;
    cudaDeviceSynchronize();
    if (s->prof.enabled) {
        char label[96];
        gt_prof_flush(&s->prof);
        snprintf(label, sizeof(label), "layers %d-%d%s%s", s->layout.layer_begin,
                 s->layout.layer_end, s->layout.is_first ? " first" : "",
                 s->layout.is_last ? " last" : "");
        gt_prof_report(&s->prof, label);
    }
    gt_prof_release(&s->prof);
    if (s->slots != NULL)
        for (int i = 0; i < s->layout.n_slots; i++) gt_cu_release_slot(&s->slots[i]);
    gt_stage_slots_release(&s->layout);
    gt_cu_release_grads(&s->shared_grads);
    free(s->slots);
    for (int i = 0; i < 4; i++) cudaFree(s->buffers[i]);
    cudaFree(s->params16);
    cudaFree(s->seg_end);
    cudaFree(s->seg_decay);
    cudaFree(s->datty);
    cudaFree(s->proj);
    cudaFree(s->colsum);
    cudaFree(s->sq);
    cudaFree(s->norm_partial);
    cudaFree(s->zero_chunks);
    cudaFree(s->loss);
    cudaFreeHost(s->host_loss);
    cudaFreeHost(s->host_sq);
    free(s->group_count);
    cudaFree(s->ref_qkv);
    cudaFree(s->ref_scores);
#ifdef GANTRY_HAVE_CUDNN
    gt_cudnn_attn_destroy(s->cudnn);
#endif
    gt_lt_destroy(&s->lt);
    if (s->opt_ready != NULL) cudaEventDestroy(s->opt_ready);
    if (s->opt_done != NULL) cudaEventDestroy(s->opt_done);
    if (s->opt_stream != NULL) cudaStreamDestroy(s->opt_stream);
    gt_stage_layout_release(&s->layout);
    free(s);
}

/* ------------------------------------------------------------------------------------------ */
/* accessors                                                                                   */

float *gt_stage_buffer(gt_stage *s, gt_buffer which) {
    if (s == NULL || (int)which < 0 || (int)which > 3) return NULL;
    /* raw access to the gradients: they must read as restarted (grad_restart.c) */
    if (which == GT_BUF_GRADS && gt_cu_grads_settle(s) != GT_OK) return NULL;
    return s->buffers[which];
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
    if (s == NULL) return 0;
    return (size_t)s->layout.B * (size_t)s->layout.T * (size_t)s->layout.cfg.n_embd *
           sizeof(gt_bf16);
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
    gt_prof_flush(&s->prof);
cleanup:
    return rc;
}

int gt_stage_read_buffer(gt_stage *s, gt_buffer which, size_t offset, size_t count,
                         float *host_dst) {
    int rc = GT_OK;
    GT_CHECK(gt_stage_check_range(gt_stage_layout_of(s), which, offset, count, host_dst,
                                  "gt_stage_read_buffer"));
    if (which == GT_BUF_GRADS) GT_CHECK(gt_cu_grads_settle(s));
    CUDA_CHECK(cudaMemcpyAsync(host_dst, s->buffers[which] + offset, count * sizeof(float),
                               cudaMemcpyDeviceToHost, s->stream));
    CUDA_CHECK(cudaStreamSynchronize(s->stream));
cleanup:
    return rc;
}

int gt_host_pin(void *ptr, size_t bytes) {
    int rc = GT_OK;
    cudaError_t status;
    if (ptr == NULL || bytes == 0) GT_INPUT_FAIL("gt_host_pin: NULL pointer or 0 bytes");
    status = cudaHostRegister(ptr, bytes, cudaHostRegisterDefault);
    if (status != cudaSuccess) {
        (void)cudaGetLastError(); /* not sticky: clear it, the memory stays usable unpinned */
        GT_FAIL(GT_EIO, "cudaHostRegister of %zu bytes failed: %s (%s)", bytes,
                cudaGetErrorName(status), cudaGetErrorString(status));
    }
cleanup:
    return rc;
}

int gt_host_unpin(void *ptr) {
    int rc = GT_OK;
    if (ptr == NULL) GT_INPUT_FAIL("gt_host_unpin: NULL pointer");
    CUDA_CHECK(cudaHostUnregister(ptr));
cleanup:
    return rc;
}

int gt_stage_write_buffer(gt_stage *s, gt_buffer which, size_t offset, size_t count,
                          const float *host_src) {
    int rc = GT_OK;
    GT_CHECK(gt_stage_check_range(gt_stage_layout_of(s), which, offset, count, host_src,
                                  "gt_stage_write_buffer"));
    if (which == GT_BUF_GRADS) GT_CHECK(gt_cu_grads_settle(s));
    CUDA_CHECK(cudaMemcpyAsync(s->buffers[which] + offset, host_src, count * sizeof(float),
                               cudaMemcpyHostToDevice, s->stream));
    if (which == GT_BUF_PARAMS)
        CUDA_CHECK(gt_cu_f32_to_bf16(s->params16 + offset, s->buffers[which] + offset, count,
                                     s->stream));
    CUDA_CHECK(cudaStreamSynchronize(s->stream));
cleanup:
    return rc;
}

/* Stages the device buffer in host memory, then writes it (safetensors.h). */
int gt_stage_save(const gt_stage *s, const char *path, gt_buffer which) {
    int rc = GT_OK;
    float *staging = NULL;
    if (s == NULL || path == NULL) GT_INPUT_FAIL("gt_stage_save: stage or path is NULL");
    if ((int)which < 0 || (int)which > 3) GT_INPUT_FAIL("gt_stage_save: bad buffer %d", which);
    GT_CALLOC(staging, s->layout.num_params);
    if (which == GT_BUF_GRADS) /* logically const: the buffer reads the same */
        GT_CHECK(gt_cu_grads_settle((gt_stage *)s));
    CUDA_CHECK(cudaStreamSynchronize(s->stream));
    CUDA_CHECK(cudaMemcpy(staging, s->buffers[which], s->layout.num_params * sizeof(float),
                          cudaMemcpyDeviceToHost));
    GT_CHECK(gt_st_write_f32(path, s->layout.tensors, s->layout.num_tensors, staging));
cleanup:
    free(staging);
    return rc;
}

int gt_stage_params_updated(gt_stage *s) {
    int rc = GT_OK;
    if (s == NULL) GT_INPUT_FAIL("gt_stage_params_updated: stage is NULL");
    CUDA_CHECK(gt_cu_f32_to_bf16(s->params16, s->buffers[GT_BUF_PARAMS], s->layout.num_params,
                                 s->stream));
cleanup:
    return rc;
}

/* ------------------------------------------------------------------------------------------ */
/* optimizer                                                                                   */

int gt_stage_zero_grad(gt_stage *s) {
    int rc = GT_OK;
    if (s == NULL) GT_INPUT_FAIL("gt_stage_zero_grad: stage is NULL");
    CUDA_CHECK(cudaMemsetAsync(s->buffers[GT_BUF_GRADS], 0, s->layout.num_params * sizeof(float),
                               s->stream));
    s->grads_fresh = 0;
cleanup:
    return rc;
}

int gt_stage_grad_sq_sum(const gt_stage *s, int include_wte, double *out) {
    int rc = GT_OK;
    if (s == NULL || out == NULL) GT_INPUT_FAIL("gt_stage_grad_sq_sum: stage or out is NULL");
    GT_CHECK(gt_cu_grads_settle((gt_stage *)s)); /* logically const: the buffer reads the same */
    size_t begin = (s->layout.has_wte && !include_wte) ? s->layout.tensors[0].numel : 0;
    CUDA_CHECK(gt_cu_sq_sum(s->sq, s->sq + 1, s->buffers[GT_BUF_GRADS] + begin,
                            s->layout.num_params - begin, s->stream));
    CUDA_CHECK(cudaMemcpyAsync(s->host_sq, s->sq, sizeof(double), cudaMemcpyDeviceToHost,
                               s->stream));
    CUDA_CHECK(cudaStreamSynchronize(s->stream));
    *out = *s->host_sq;
cleanup:
    return rc;
}

/* The kernel's arguments for one AdamW step. */
static gt_cu_adamw_args adamw_args(float lr, float beta1, float beta2, float eps,
                                   float weight_decay, int step_t, float grad_scale) {
    const gt_adamw_scalars k = gt_adamw_scalars_at(lr, beta1, beta2, step_t);
    gt_cu_adamw_args a;
    a.lr = lr;
    a.beta1 = beta1;
    a.beta2 = beta2;
    a.eps = eps;
    a.weight_decay = weight_decay;
    a.grad_scale = grad_scale;
    a.step_size = k.step_size;
    a.bc2_sqrt = k.bc2_sqrt;
    a.one_minus_beta1 = k.one_minus_beta1;
    a.one_minus_beta2 = k.one_minus_beta2;
    return a;
}

/* AdamW of elements [begin, begin + n) on `stream`; sq_partial: see gt_cu_adamw (NULL: none). */
static cudaError_t enqueue_adamw(gt_stage *s, size_t begin, size_t n, gt_cu_adamw_args a,
                                 double *sq_partial, cudaStream_t stream) {
    return gt_cu_adamw(s->buffers[GT_BUF_PARAMS], s->params16, s->buffers[GT_BUF_GRADS],
                       s->buffers[GT_BUF_ADAM_M], s->buffers[GT_BUF_ADAM_V], begin, n,
                       s->seg_end, s->seg_decay, s->n_segments, a, sq_partial, stream);
}

/* The optimizer stream (lowest priority: the compute stream's kernels go first) and its
 * events, created on first use. */
static int ensure_opt_stream(gt_stage *s) {
    int rc = GT_OK;
    if (s->opt_stream != NULL) return GT_OK;
    int lo = 0, hi = 0;
    CUDA_CHECK(cudaDeviceGetStreamPriorityRange(&lo, &hi));
    CUDA_CHECK(cudaStreamCreateWithPriority(&s->opt_stream, cudaStreamNonBlocking, lo));
    CUDA_CHECK(cudaEventCreateWithFlags(&s->opt_ready, cudaEventDisableTiming));
    CUDA_CHECK(cudaEventCreateWithFlags(&s->opt_done, cudaEventDisableTiming));
cleanup:
    return rc;
}

int gt_stage_adamw_step(gt_stage *s, float lr, float beta1, float beta2, float eps,
                        float weight_decay, int step_t, float grad_scale) {
    int rc = GT_OK;
    if (s == NULL) GT_INPUT_FAIL("gt_stage_adamw_step: stage is NULL");
    if (step_t < 1) GT_INPUT_FAIL("gt_stage_adamw_step: step_t=%d (must be >= 1)", step_t);
    GT_CHECK(gt_cu_grads_settle(s));
    if (s->lt.scratch != NULL) gt_lt_trim(&s->lt); /* the first step tuned every shape */
    gt_prof_mark(&s->prof, GT_P_ADAMW, s->stream);
    CUDA_CHECK(enqueue_adamw(s, 0, s->layout.num_params,
                             adamw_args(lr, beta1, beta2, eps, weight_decay, step_t, grad_scale),
                             NULL, s->stream));
    gt_prof_mark(&s->prof, GT_P_END, s->stream);
cleanup:
    return rc;
}

int gt_stage_adamw_range(gt_stage *s, size_t offset, size_t count, float lr, float beta1,
                         float beta2, float eps, float weight_decay, int step_t,
                         float grad_scale) {
    int rc = GT_OK;
    GT_CHECK(gt_stage_check_adamw_range(gt_stage_layout_of(s), offset, count, step_t));
    GT_CHECK(gt_cu_grads_settle(s));
    GT_CHECK(ensure_opt_stream(s));
    CUDA_CHECK(cudaEventRecord(s->opt_ready, s->stream));
    CUDA_CHECK(cudaStreamWaitEvent(s->opt_stream, s->opt_ready, 0));
    CUDA_CHECK(enqueue_adamw(s, offset, count,
                             adamw_args(lr, beta1, beta2, eps, weight_decay, step_t, grad_scale),
                             s->layout.norm_capture ? s->norm_partial : NULL, s->opt_stream));
cleanup:
    return rc;
}

int gt_stage_norm_capture_begin(gt_stage *s) {
    int rc = GT_OK;
    GT_CHECK(gt_stage_norm_capture_start(s == NULL ? NULL : &s->layout));
    GT_CHECK(ensure_opt_stream(s));
    size_t bytes = gt_cu_adamw_grid_blocks(s->layout.num_params) * sizeof(double);
    if (s->norm_partial == NULL) CUDA_MALLOC(s->norm_partial, bytes);
    CUDA_CHECK(cudaMemsetAsync(s->norm_partial, 0, bytes, s->opt_stream));
cleanup:
    return rc;
}

int gt_stage_norm_capture_end(gt_stage *s, double *sq) {
    int rc = GT_OK;
    GT_CHECK(gt_stage_norm_capture_stop(s == NULL ? NULL : &s->layout, sq));
    CUDA_CHECK(gt_cu_sum_doubles(s->sq, s->norm_partial,
                                 gt_cu_adamw_grid_blocks(s->layout.num_params), s->opt_stream));
    CUDA_CHECK(cudaMemcpyAsync(s->host_sq, s->sq, sizeof(double), cudaMemcpyDeviceToHost,
                               s->opt_stream));
    CUDA_CHECK(cudaStreamSynchronize(s->opt_stream));
    *sq = *s->host_sq;
cleanup:
    return rc;
}

int gt_stage_join_optimizer(gt_stage *s) {
    int rc = GT_OK;
    if (s == NULL) GT_INPUT_FAIL("gt_stage_join_optimizer: stage is NULL");
    if (s->opt_stream == NULL) return GT_OK;
    if (s->lt.scratch != NULL) gt_lt_trim(&s->lt); /* the first step tuned every shape */
    /* the profile's AdamW interval: the compute stream waiting for the optimizer stream (it
     * also ends the warm-up step, as gt_stage_adamw_step's mark does) */
    gt_prof_mark(&s->prof, GT_P_ADAMW, s->stream);
    CUDA_CHECK(cudaEventRecord(s->opt_done, s->opt_stream));
    CUDA_CHECK(cudaStreamWaitEvent(s->stream, s->opt_done, 0));
    gt_prof_mark(&s->prof, GT_P_END, s->stream);
cleanup:
    return rc;
}
