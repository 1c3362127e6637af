/*
 * matmul.c — cuBLASLt wrapper of matmul.h: builds the operation and layout descriptors, asks the
 * heuristic for its candidate algorithms within the workspace, caches both per product shape (a
 * plan), and runs the product with the call's pointers.
 *
 * Autotuning (GANTRY_GEMM_AUTOTUNE, default on; 0 = the heuristic's first choice): on a shape's
 * first call the heuristic's candidates (GANTRY_GEMM_CANDIDATES, default 8, at most
 * GT_TUNE_MAX_CANDIDATES) are timed on the call's own A and B with D (and a written epilogue
 * aux) redirected to a scratch buffer, so the tuning launches change nothing the caller can see;
 * the least median time over interleaved rounds wins. GANTRY_GEMM_TUNE_LOG=1 prints one
 * `gantry-gemm-tune {json}` line per tuned shape to stderr (the CUDA device, the shape, every
 * candidate's median time, the choice and its TFLOP/s). The choice is kept per process and
 * shape, so every stage of a process runs the same algorithm for the same shape (split and
 * full backward stay bit-identical). Every cuBLASLt call is checked (CUBLAS_CHECK carries the
 * status name and file:line).
 */
#include <pthread.h>
#include <stdio.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cuda/cuda_check.h"
#include "cuda/matmul.h"

#define CUBLAS_CHECK(call)                                                                     \
    do {                                                                                       \
        cublasStatus_t cublas_rc_ = (call);                                                    \
        if (cublas_rc_ != CUBLAS_STATUS_SUCCESS)                                               \
            GT_FAIL(GT_ESTATE, "%s failed: %s", #call, cublasLtGetStatusName(cublas_rc_));     \
    } while (0)

/* What identifies a plan: everything of gt_matmul_args but the pointers. */
typedef struct {
    int m, n, k, transa, transb, lda, ldb, ldd, d_fp32, epilogue, batch, has_cin;
    long long stride_a, stride_b, stride_d;
    float beta;
} gt_lt_key;

#define GT_TUNE_CANDIDATES 8      /* default */
#define GT_TUNE_MAX_CANDIDATES 32
#define GT_TUNE_ROUNDS 7 /* timed launches of each candidate (odd); the median counts */
#define GT_TUNE_MAX_SCRATCH ((size_t)1 << 30) /* larger outputs keep the heuristic's choice */
#define GT_PREF_ALIGNMENT 16u /* every operand gantry passes is 16-byte aligned (C % 8 == 0) */

struct gt_lt_plan {
    gt_lt_key key;
    cublasLtMatmulDesc_t op;
    cublasLtMatrixLayout_t la, lb, lc, ld;
    cublasLtMatmulAlgo_t algo;
    cublasLtMatmulAlgo_t candidates[GT_TUNE_MAX_CANDIDATES];
    int n_candidates, tuned;
};

/* The process's choices: shape -> algorithm (shared by every stage's handle). */
typedef struct {
    gt_lt_key key;
    cublasLtMatmulAlgo_t algo;
} gt_lt_choice;
static gt_lt_choice *g_choices;
static int g_n_choices, g_cap_choices;
static pthread_mutex_t g_choices_lock = PTHREAD_MUTEX_INITIALIZER;

static int choice_find(const gt_lt_key *k, cublasLtMatmulAlgo_t *algo) {
    int found = 0;
    pthread_mutex_lock(&g_choices_lock);
    for (int i = 0; i < g_n_choices && !found; i++) {
        if (memcmp(&g_choices[i].key, k, sizeof(*k)) == 0) {
            *algo = g_choices[i].algo;
            found = 1;
        }
    }
    pthread_mutex_unlock(&g_choices_lock);
    return found;
}

/* Remembers a choice; on allocation failure it is simply not remembered. */
static void choice_add(const gt_lt_key *k, const cublasLtMatmulAlgo_t *algo) {
    pthread_mutex_lock(&g_choices_lock);
    if (g_n_choices == g_cap_choices) {
        int cap = g_cap_choices ? 2 * g_cap_choices : 64;
        gt_lt_choice *grown = realloc(g_choices, (size_t)cap * sizeof(*grown));
        if (grown != NULL) g_choices = grown, g_cap_choices = cap;
    }
    if (g_n_choices < g_cap_choices) {
        g_choices[g_n_choices].key = *k;
        g_choices[g_n_choices].algo = *algo;
        g_n_choices++;
    }
    pthread_mutex_unlock(&g_choices_lock);
}

/* How many of the heuristic's algorithms to ask for: 1 without autotuning, else
 * lt->candidates clamped to 1..GT_TUNE_MAX_CANDIDATES. */
static int candidates_wanted(const gt_lt *lt) {
    if (!lt->autotune) return 1;
    int n = lt->candidates;
    return n < 1 ? 1 : n > GT_TUNE_MAX_CANDIDATES ? GT_TUNE_MAX_CANDIDATES : n;
}

/* One line per tuned shape: the CUDA device, the key, each candidate's median ms (-1: failed
 * to launch), the chosen index and its TFLOP/s. */
static void tune_log(const gt_lt_key *k, const float *ms, int n, int best) {
    double flop = 2.0 * k->m * (double)k->n * k->k * (k->batch > 1 ? k->batch : 1);
    int device = -1;
    (void)cudaGetDevice(&device); /* which rank's line, when ranks share one stderr */
    fprintf(stderr,
            "gantry-gemm-tune {\"device\": %d, \"m\": %d, \"n\": %d, \"k\": %d, \"transa\": %d, "
            "\"transb\": %d, \"epilogue\": %d, \"d_fp32\": %d, \"beta\": %g, "
            "\"batch\": %d, \"ms\": [",
            device, k->m, k->n, k->k, k->transa, k->transb, k->epilogue, k->d_fp32,
            (double)k->beta, k->batch);
    for (int i = 0; i < n; i++) fprintf(stderr, "%s%.4f", i ? ", " : "", (double)ms[i]);
    fprintf(stderr, "], \"best\": %d, \"tflops\": %.1f}\n", best,
            best >= 0 && ms[best] > 0.0f ? flop / (1e9 * (double)ms[best]) : 0.0);
}

static void plan_release(gt_lt_plan *p) {
    if (p->la) cublasLtMatrixLayoutDestroy(p->la);
    if (p->lb) cublasLtMatrixLayoutDestroy(p->lb);
    if (p->lc) cublasLtMatrixLayoutDestroy(p->lc);
    if (p->ld) cublasLtMatrixLayoutDestroy(p->ld);
    if (p->op) cublasLtMatmulDescDestroy(p->op);
    memset(p, 0, sizeof(*p));
}

int gt_lt_create(gt_lt *lt, size_t workspace_size) {
    int rc = GT_OK;
    memset(lt, 0, sizeof(*lt));
    lt->autotune = 1;
    lt->candidates = GT_TUNE_CANDIDATES;
    CUBLAS_CHECK(cublasLtCreate(&lt->handle));
    CUDA_MALLOC(lt->workspace, workspace_size);
    lt->workspace_size = workspace_size;
cleanup:
    return rc;
}

void gt_lt_trim(gt_lt *lt) {
    for (int i = 0; i < lt->n_retired; i++) cudaFree(lt->retired[i]);
    lt->n_retired = 0;
    if (lt->scratch != NULL) cudaFree(lt->scratch);
    lt->scratch = NULL, lt->scratch_size = 0;
}

void gt_lt_destroy(gt_lt *lt) {
    if (lt == NULL) return;
    gt_lt_trim(lt);
    for (int i = 0; i < lt->n_plans; i++) plan_release(&lt->plans[i]);
    free(lt->plans);
    if (lt->workspace != NULL) cudaFree(lt->workspace);
    if (lt->handle != NULL) cublasLtDestroy(lt->handle);
    memset(lt, 0, sizeof(*lt));
}

static int set_batch(cublasLtMatrixLayout_t layout, int batch, long long stride) {
    int rc = GT_OK;
    int32_t count = batch;
    int64_t offset = stride;
    CUBLAS_CHECK(cublasLtMatrixLayoutSetAttribute(layout, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT,
                                                  &count, sizeof(count)));
    CUBLAS_CHECK(cublasLtMatrixLayoutSetAttribute(
        layout, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &offset, sizeof(offset)));
cleanup:
    return rc;
}

static gt_lt_key key_of(const gt_matmul_args *a) {
    gt_lt_key k;
    memset(&k, 0, sizeof(k)); /* padding too: keys are compared with memcmp */
    k.m = a->m, k.n = a->n, k.k = a->k, k.transa = a->transa, k.transb = a->transb;
    k.lda = a->lda, k.ldb = a->ldb, k.ldd = a->ldd, k.d_fp32 = a->d_fp32;
    k.epilogue = (int)a->epilogue, k.batch = a->batch > 1 ? a->batch : 0;
    k.has_cin = a->Cin != NULL;
    if (k.batch) k.stride_a = a->stride_a, k.stride_b = a->stride_b, k.stride_d = a->stride_d;
    k.beta = a->Cin != NULL ? a->beta : 0.0f;
    return k;
}

/* Builds the descriptors of `k` and asks the heuristic for its candidates; *unsupported = 1 if
 * it has none. */
static int plan_build(gt_lt *lt, const gt_lt_key *k, gt_lt_plan *p, int *unsupported) {
    int rc = GT_OK;
    cublasLtMatmulPreference_t pref = NULL;
    cublasLtMatmulHeuristicResult_t heur[GT_TUNE_MAX_CANDIDATES];
    int found = 0;
    const uint32_t align = GT_PREF_ALIGNMENT;
    memset(p, 0, sizeof(*p));
    p->key = *k;
    cublasOperation_t ta = k->transa ? CUBLAS_OP_T : CUBLAS_OP_N;
    cublasOperation_t tb = k->transb ? CUBLAS_OP_T : CUBLAS_OP_N;
    cudaDataType_t dtype = k->d_fp32 ? CUDA_R_32F : CUDA_R_16BF;
    CUBLAS_CHECK(cublasLtMatmulDescCreate(&p->op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_TRANSA, &ta,
                                                sizeof(ta)));
    CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_TRANSB, &tb,
                                                sizeof(tb)));
    cublasLtEpilogue_t epi = CUBLASLT_EPILOGUE_DEFAULT;
    switch ((gt_epilogue)k->epilogue) {
    case GT_EPI_BIAS: epi = CUBLASLT_EPILOGUE_BIAS; break;
    case GT_EPI_GELU_BIAS: epi = CUBLASLT_EPILOGUE_GELU_AUX_BIAS; break;
    case GT_EPI_DGELU: epi = CUBLASLT_EPILOGUE_DGELU; break;
    default: break;
    }
    CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi,
                                                sizeof(epi)));
    if (k->epilogue == GT_EPI_BIAS || k->epilogue == GT_EPI_GELU_BIAS) {
        cudaDataType_t bias_type = CUDA_R_16BF;
        CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE,
                                                    &bias_type, sizeof(bias_type)));
    }
    if (k->epilogue == GT_EPI_GELU_BIAS || k->epilogue == GT_EPI_DGELU) {
        int64_t aux_ld = k->ldd;
        cudaDataType_t aux_type = CUDA_R_16BF;
        CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD,
                                                    &aux_ld, sizeof(aux_ld)));
        CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(
            p->op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_DATA_TYPE, &aux_type, sizeof(aux_type)));
    }
    /* layouts: stored (rows, cols) of each operand before op() */
    CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p->la, CUDA_R_16BF, k->transa ? k->k : k->m,
                                            k->transa ? k->m : k->k, k->lda));
    CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p->lb, CUDA_R_16BF, k->transb ? k->n : k->k,
                                            k->transb ? k->k : k->n, k->ldb));
    CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p->lc, dtype, k->m, k->n, k->ldd));
    CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p->ld, dtype, k->m, k->n, k->ldd));
    if (k->batch > 1) {
        GT_CHECK(set_batch(p->la, k->batch, k->stride_a));
        GT_CHECK(set_batch(p->lb, k->batch, k->stride_b));
        GT_CHECK(set_batch(p->lc, k->batch, k->stride_d));
        GT_CHECK(set_batch(p->ld, k->batch, k->stride_d));
    }
    CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
    CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(
        pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &lt->workspace_size,
        sizeof(lt->workspace_size)));
    /* only algorithms that work for any call of this shape (the first call's pointers may be
     * better aligned than a later call's) */
    CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(
        pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &align, sizeof(align)));
    CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(
        pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &align, sizeof(align)));
    CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(
        pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &align, sizeof(align)));
    CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(
        pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &align, sizeof(align)));
    CUBLAS_CHECK(cublasLtMatmulAlgoGetHeuristic(lt->handle, p->op, p->la, p->lb, p->lc, p->ld,
                                                pref, candidates_wanted(lt), heur, &found));
    if (found == 0) {
        if (unsupported) *unsupported = 1;
        GT_FAIL(GT_ESTATE, "cuBLASLt has no algorithm for m=%d n=%d k=%d transa=%d transb=%d "
                "epilogue=%d d_fp32=%d", k->m, k->n, k->k, k->transa, k->transb, k->epilogue,
                k->d_fp32);
    }
    for (int i = 0; i < found; i++) p->candidates[i] = heur[i].algo;
    p->n_candidates = found;
    p->algo = heur[0].algo;
    /* a shape this process has tuned before (another stage's handle): the same algorithm */
    p->tuned = found == 1 || choice_find(k, &p->algo);
cleanup:
    if (pref) cublasLtMatmulPreferenceDestroy(pref);
    if (rc != GT_OK) plan_release(p);
    return rc;
}

/* The cached plan of `a`'s shape, built on first use. */
static int plan_for(gt_lt *lt, const gt_matmul_args *a, gt_lt_plan **out, int *unsupported) {
    int rc = GT_OK;
    gt_lt_key k = key_of(a);
    gt_lt_plan fresh;
    for (int i = 0; i < lt->n_plans; i++) {
        if (memcmp(&lt->plans[i].key, &k, sizeof(k)) == 0) {
            *out = &lt->plans[i];
            return GT_OK;
        }
    }
    if (lt->n_plans == lt->cap_plans) {
        int cap = lt->cap_plans ? 2 * lt->cap_plans : 32;
        gt_lt_plan *grown = realloc(lt->plans, (size_t)cap * sizeof(*grown));
        if (grown == NULL) GT_FAIL(GT_ENOMEM, "out of memory for %d cuBLASLt plans", cap);
        lt->plans = grown;
        lt->cap_plans = cap;
    }
    GT_CHECK(plan_build(lt, &k, &fresh, unsupported));
    lt->plans[lt->n_plans] = fresh;
    *out = &lt->plans[lt->n_plans++];
cleanup:
    return rc;
}

/* Bytes of the (possibly batched) output of a plan. */
static size_t output_bytes(const gt_lt_key *k) {
    size_t elem = k->d_fp32 ? sizeof(float) : 2, cols = (size_t)k->ldd * (size_t)k->n;
    if (k->batch > 1) cols += (size_t)(k->batch - 1) * (size_t)k->stride_d;
    return cols * elem;
}

/* One launch of candidate c on the call's operands with D in the tuning scratch; 1 if it ran. */
static int run_candidate(gt_lt *lt, gt_lt_plan *p, const gt_matmul_args *a, int c,
                         cudaStream_t stream) {
    const float alpha = 1.0f, beta = p->key.beta;
    return cublasLtMatmul(lt->handle, p->op, &alpha, a->A, p->la, a->B, p->lb, &beta,
                          lt->scratch, p->lc, lt->scratch, p->ld, &p->candidates[c],
                          lt->workspace, lt->workspace_size, stream) == CUBLAS_STATUS_SUCCESS;
}

/* Median of one candidate's GT_TUNE_ROUNDS times (an odd count; sorts a copy). */
static float median_ms(const float v[GT_TUNE_ROUNDS]) {
    float s[GT_TUNE_ROUNDS];
    memcpy(s, v, sizeof(s));
    for (int i = 1; i < GT_TUNE_ROUNDS; i++)
        for (int j = i; j > 0 && s[j - 1] > s[j]; j--) {
            float t = s[j];
            s[j] = s[j - 1], s[j - 1] = t;
        }
    return s[GT_TUNE_ROUNDS / 2];
}

/* Times the plan's candidates on the call's operands with D (and a written aux) in scratch;
 * keeps the one of least median time. One untimed launch of each candidate first (those that
 * fail to launch are left out), then GT_TUNE_ROUNDS rounds that launch every candidate once
 * between events, so a drift of the clocks (the power cap reacting to the tuning itself, another
 * stream's work) falls on every candidate alike instead of on whichever ran during it. If none
 * runs, the heuristic's first choice stays. */
static int tune(gt_lt *lt, gt_lt_plan *p, const gt_matmul_args *a, cudaStream_t stream) {
    int rc = GT_OK;
    cudaEvent_t ev[GT_TUNE_MAX_CANDIDATES + 1] = {NULL};
    const size_t d_bytes = (output_bytes(&p->key) + 255) & ~(size_t)255;
    const size_t aux_bytes = p->key.epilogue == GT_EPI_GELU_BIAS
                                 ? (size_t)p->key.ldd * (size_t)p->key.n * 2 : 0;
    const int n = p->n_candidates;
    float cand_ms[GT_TUNE_MAX_CANDIDATES], round_ms[GT_TUNE_MAX_CANDIDATES][GT_TUNE_ROUNDS];
    int ok[GT_TUNE_MAX_CANDIDATES], best = -1;
    p->tuned = 1;
    if (d_bytes + aux_bytes > GT_TUNE_MAX_SCRATCH) goto remember;
    if (d_bytes + aux_bytes > lt->scratch_size) {
        /* no cudaFree here: it would synchronize the device in the middle of a pipeline step,
         * with NCCL transfers in flight; outgrown buffers wait for gt_lt_trim */
        if (lt->scratch != NULL) {
            if (lt->n_retired == GT_LT_RETIRED) goto remember;
            lt->retired[lt->n_retired++] = lt->scratch;
        }
        lt->scratch = NULL, lt->scratch_size = 0;
        if (cudaMalloc(&lt->scratch, d_bytes + aux_bytes) != cudaSuccess) {
            (void)cudaGetLastError(); /* no room to tune: the heuristic's choice, not a failure */
            lt->scratch = NULL;
            goto remember;
        }
        lt->scratch_size = d_bytes + aux_bytes;
    }
    if (aux_bytes > 0) {
        void *aux = (char *)lt->scratch + d_bytes;
        CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(
            p->op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &aux, sizeof(aux)));
    }
    for (int c = 0; c <= n; c++) CUDA_CHECK(cudaEventCreate(&ev[c]));
    for (int c = 0; c < n; c++) /* the untimed launch of each: does it run at all */
        ok[c] = run_candidate(lt, p, a, c, stream);
    for (int r = 0; r < GT_TUNE_ROUNDS; r++) {
        /* the order turns each round and an untimed launch leads it, so no candidate is always
         * the one that starts after the idle gap of the synchronize */
        (void)run_candidate(lt, p, a, r % n, stream);
        CUDA_CHECK(cudaEventRecord(ev[0], stream));
        for (int j = 0; j < n; j++) {
            int c = (r + j) % n;
            if (ok[c]) ok[c] = run_candidate(lt, p, a, c, stream);
            CUDA_CHECK(cudaEventRecord(ev[j + 1], stream));
        }
        CUDA_CHECK(cudaEventSynchronize(ev[n]));
        for (int j = 0; j < n; j++)
            CUDA_CHECK(cudaEventElapsedTime(&round_ms[(r + j) % n][r], ev[j], ev[j + 1]));
    }
    CUDA_CHECK(cudaGetLastError());
    for (int c = 0; c < n; c++) {
        cand_ms[c] = ok[c] ? median_ms(round_ms[c]) : -1.0f;
        if (ok[c] && (best < 0 || cand_ms[c] < cand_ms[best])) best = c;
    }
    if (best >= 0) p->algo = p->candidates[best];
    if (lt->tune_log) tune_log(&p->key, cand_ms, n, best);
remember:
    choice_add(&p->key, &p->algo);
cleanup:
    for (int c = 0; c <= n; c++)
        if (ev[c] != NULL) cudaEventDestroy(ev[c]);
    return rc;
}

int gt_matmul(gt_lt *lt, const gt_matmul_args *a, cudaStream_t stream, int *unsupported) {
    int rc = GT_OK;
    gt_lt_plan *p = NULL;
    if (unsupported) *unsupported = 0;
    GT_CHECK(plan_for(lt, a, &p, unsupported));
    if (a->epilogue == GT_EPI_BIAS || a->epilogue == GT_EPI_GELU_BIAS)
        CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_BIAS_POINTER,
                                                    &a->bias, sizeof(a->bias)));
    if (a->epilogue == GT_EPI_GELU_BIAS || a->epilogue == GT_EPI_DGELU)
        CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(
            p->op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &a->aux, sizeof(a->aux)));
    if (!p->tuned) {
        GT_CHECK(tune(lt, p, a, stream));
        if (a->epilogue == GT_EPI_GELU_BIAS) /* tune pointed aux at its scratch */
            CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(
                p->op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &a->aux, sizeof(a->aux)));
    }
    {
        const float alpha = a->scaled ? a->alpha : 1.0f;
        const float beta = p->key.beta;
        const void *cin = a->Cin != NULL ? a->Cin : a->D;
        CUBLAS_CHECK(cublasLtMatmul(lt->handle, p->op, &alpha, a->A, p->la, a->B, p->lb, &beta,
                                    cin, p->lc, a->D, p->ld, &p->algo, lt->workspace,
                                    lt->workspace_size, stream));
    }
cleanup:
    return rc;
}
