/*
 * compute_cuda.c — forward and backward of one CUDA stage, the backend hooks of stage_slots.h
 * (see cpu/stage_cpu.c for the same model on the CPU; notation there). Every launch and library call is checked with file:line.
 *
 * Matrix products go through cuBLASLt (matmul.h) in column-major terms: a row-major (N, OC)
 * activation is a column-major (OC, N) matrix, and a Conv1D weight (IC, OC) row-major is a
 * column-major (OC, IC) one, so y = x @ W + b is D(OC,N) = W(OC,IC) @ x(IC,N) with no transpose.
 * Fusions: bias (+ residual through Cin with beta 1) on c_attn / c_proj, bias + GELU with the
 * pre-activation as aux on c_fc, dGELU on the c_fc input gradient; weight gradients accumulate
 * straight into the fp32 gradient buffer (fp32 D with beta 1). Attention: cuDNN flash SDPA, or
 * the reference path (strided-batched products and a causal softmax kernel) when unavailable.
 *
 * Each action is a host part (staging the host inputs, the encoder groups) around a
 * device body that only enqueues work; the body runs through graph_cache.h, so from its
 * second run on a slot it is one captured CUDA graph — except a backward armed with the
 * gradients-ready hook (stage.h), which always runs eagerly (run_weight_action): the hook is
 * host code between the layers' launches. MARK() places the op profiler's marks
 * (op_profile.h; profiling runs the bodies eagerly).
 */
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "cuda/cuda_check.h"
#include "cuda/stage_cuda.h"
#include "stage_slots.h"

/* Start of an operation for GANTRY_PROFILE_OPS (a no-op when profiling is off). */
#define MARK(op) gt_prof_mark(&s->prof, (op), s->stream)

/* ------------------------------------------------------------------------------------------ */
/* device arenas                                                                               */

typedef struct {
    char *base;  /* NULL while counting */
    size_t used; /* bytes */
} gt_arena;

static void *take(gt_arena *a, size_t bytes) {
    size_t off = (a->used + 255) & ~(size_t)255;
    a->used = off + bytes;
    return a->base ? a->base + off : NULL;
}

/* Row stride of the LayerNorm 1 / 2 outputs: C columns, then a constant 1 (column C) that turns
 * the weight-gradient product of c_attn / c_fc into the bias gradient's too (see
 * linear_backward_weight), then zeros (set once per slot, never written again). */
static int ln_ld(const gt_stage *s) { return s->layout.cfg.n_embd + GT_CU_LN_PAD; }

static void layout_slot(const gt_stage *s, gt_cu_slot *t, gt_arena *a) {
    size_t N = (size_t)s->layout.B * s->layout.T, C = (size_t)s->layout.cfg.n_embd;
    size_t LD = (size_t)ln_ld(s);
    size_t Vp = (size_t)gt_cu_logits_ld(s->layout.cfg.vocab_size);
    size_t bh = (size_t)s->layout.B * s->layout.cfg.n_head, bf = sizeof(gt_bf16);
    size_t f = sizeof(float);
    t->x0 = take(a, N * C * bf);
    for (int l = 0; l < s->layout.nl; l++) {
        gt_cu_layer *L = &t->layers[l];
        L->ln1 = take(a, N * LD * bf);
        L->ln1_mean = take(a, N * f);
        L->ln1_rstd = take(a, N * f);
        L->qkv = take(a, 3 * N * C * bf);
        L->atty = take(a, N * C * bf);
        if (s->cudnn != NULL) L->stats = take(a, bh * s->layout.T * f);
        else L->att = take(a, bh * s->layout.T * s->layout.T * bf);
        L->res2 = take(a, N * C * bf);
        L->ln2 = take(a, N * LD * bf);
        L->ln2_mean = take(a, N * f);
        L->ln2_rstd = take(a, N * f);
        L->fch = take(a, 4 * N * C * bf);
        L->fch_gelu = take(a, 4 * N * C * bf);
        L->res3 = take(a, N * C * bf);
    }
    if (s->layout.is_last) {
        t->lnf = take(a, N * C * bf);
        t->lnf_mean = take(a, N * f);
        t->lnf_rstd = take(a, N * f);
        t->logits = take(a, N * Vp * bf);
        t->lse = take(a, N * f);
        t->losses = take(a, N * f);
    }
    t->tokens = take(a, N * sizeof(int32_t));
    t->targets = take(a, N * sizeof(int32_t));
    t->groups = take(a, (3 * N + 2) * sizeof(int32_t));
}

int gt_cu_alloc_slot(gt_stage *s, gt_cu_slot *slot) {
    int rc = GT_OK;
    size_t N = (size_t)s->layout.B * s->layout.T;
    gt_arena a = {NULL, 0};
    GT_CALLOC(slot->layers, s->layout.nl > 0 ? s->layout.nl : 1);
    layout_slot(s, slot, &a);
    CUDA_MALLOC(slot->block, a.used);
    a.base = slot->block;
    a.used = 0;
    layout_slot(s, slot, &a);
    for (int l = 0; l < s->layout.nl; l++) { /* the constant columns of the LayerNorm outputs */
        CUDA_CHECK(gt_cu_set_ones_column(slot->layers[l].ln1, (int)N, ln_ld(s),
                                         s->layout.cfg.n_embd, s->stream));
        CUDA_CHECK(gt_cu_set_ones_column(slot->layers[l].ln2, (int)N, ln_ld(s),
                                         s->layout.cfg.n_embd, s->stream));
    }
    CUDA_CHECK(cudaStreamSynchronize(s->stream)); /* before any other stream touches the slot */
    CUDA_CHECK(cudaMallocHost((void **)&slot->staging, (5 * N + 2) * sizeof(int32_t)));
    CUDA_CHECK(cudaEventCreateWithFlags(&slot->uploaded, cudaEventDisableTiming));
cleanup:
    return rc;
}

void gt_cu_release_slot(gt_cu_slot *slot) {
    for (int k = 0; k < GT_GRAPH_KINDS; k++) gt_graph_release(&slot->graphs[k]);
    if (slot->block) cudaFree(slot->block);
    if (slot->staging) cudaFreeHost(slot->staging);
    if (slot->uploaded) cudaEventDestroy(slot->uploaded);
    free(slot->layers);
    memset(slot, 0, sizeof(*slot));
}

static void layout_grads(const gt_stage *s, gt_cu_grads *g, gt_arena *a) {
    size_t N = (size_t)s->layout.B * s->layout.T, C = (size_t)s->layout.cfg.n_embd;
    size_t bf = sizeof(gt_bf16);
    for (int r = 0; r < g->n_resid; r++) g->dresid[r] = take(a, N * C * bf);
    for (int l = 0; l < g->n_layers; l++) {
        gt_cu_layer_grads *L = &g->layers[l];
        L->dres2 = take(a, N * C * bf);
        L->dln1 = take(a, N * C * bf);
        L->dln2 = take(a, N * C * bf);
        L->dqkv = take(a, 3 * N * C * bf);
        L->dfch = take(a, 4 * N * C * bf);
    }
    if (s->layout.is_last) g->dlnf = take(a, N * C * bf);
}

int gt_cu_alloc_grads(gt_stage *s, gt_cu_grads *g, int full) {
    int rc = GT_OK;
    gt_arena a = {NULL, 0};
    g->n_layers = full ? s->layout.nl : (s->layout.nl > 0 ? 1 : 0);
    g->n_resid = full ? s->layout.nl + 1 : 2;
    GT_CALLOC(g->layers, g->n_layers > 0 ? g->n_layers : 1);
    GT_CALLOC(g->dresid, g->n_resid);
    layout_grads(s, g, &a);
    CUDA_MALLOC(g->block, a.used);
    a.base = g->block;
    a.used = 0;
    layout_grads(s, g, &a);
cleanup:
    return rc;
}

void gt_cu_release_grads(gt_cu_grads *g) {
    if (g->block) cudaFree(g->block);
    free(g->layers);
    free(g->dresid);
    memset(g, 0, sizeof(*g));
}

/* ------------------------------------------------------------------------------------------ */
/* products                                                                                    */

/* y (N,OC) = x (N,IC; rows x_ld apart) @ W (IC,OC) [+ b] [+ resid]; bf16 */
static int linear_forward(gt_stage *s, gt_bf16 *y, const gt_bf16 *x, int x_ld, const gt_bf16 *W,
                          const gt_bf16 *b, const gt_bf16 *resid, int N, int IC, int OC) {
    gt_matmul_args m;
    memset(&m, 0, sizeof(m));
    m.D = y, m.A = W, m.B = x;
    m.m = OC, m.n = N, m.k = IC;
    m.lda = OC, m.ldb = x_ld, m.ldd = OC;
    m.Cin = resid, m.beta = 1.0f;
    m.epilogue = b ? GT_EPI_BIAS : GT_EPI_NONE;
    m.bias = b;
    return gt_matmul(&s->lt, &m, s->stream, NULL);
}

/* out (N,OC) = gelu(pre), pre = x @ W + b kept for backward (fused epilogue or a kernel);
 * x rows x_ld apart */
static int linear_gelu_forward(gt_stage *s, gt_bf16 *out, gt_bf16 *pre, const gt_bf16 *x,
                               int x_ld, const gt_bf16 *W, const gt_bf16 *b, int N, int IC,
                               int OC) {
    int rc = GT_OK;
    if (s->gelu_fused) {
        gt_matmul_args m;
        int unsupported = 0;
        memset(&m, 0, sizeof(m));
        m.D = out, m.A = W, m.B = x;
        m.m = OC, m.n = N, m.k = IC;
        m.lda = OC, m.ldb = x_ld, m.ldd = OC;
        m.epilogue = GT_EPI_GELU_BIAS;
        m.bias = b;
        m.aux = pre;
        rc = gt_matmul(&s->lt, &m, s->stream, &unsupported);
        if (rc == GT_OK) goto cleanup;
        if (!unsupported) goto cleanup;
        s->gelu_fused = 0; /* fall back from now on */
        rc = GT_OK;
    }
    GT_CHECK(linear_forward(s, pre, x, x_ld, W, b, NULL, N, IC, OC));
    CUDA_CHECK(gt_cu_gelu_forward(out, pre, (size_t)N * OC, s->stream));
cleanup:
    return rc;
}

/* dx (N,IC) = dy (N,OC) @ W^T; with pre != NULL also dx *= gelu'(pre) */
static int linear_backward_input(gt_stage *s, gt_bf16 *dx, const gt_bf16 *dy, const gt_bf16 *W,
                                 const gt_bf16 *pre, int N, int IC, int OC) {
    int rc = GT_OK;
    gt_matmul_args m;
    memset(&m, 0, sizeof(m));
    m.D = dx, m.A = W, m.B = dy;
    m.m = IC, m.n = N, m.k = OC;
    m.transa = 1;
    m.lda = OC, m.ldb = OC, m.ldd = IC;
    if (pre != NULL && s->dgelu_fused) {
        int unsupported = 0;
        m.epilogue = GT_EPI_DGELU;
        m.aux = (void *)pre;
        rc = gt_matmul(&s->lt, &m, s->stream, &unsupported);
        if (rc == GT_OK || !unsupported) goto cleanup;
        s->dgelu_fused = 0;
        rc = GT_OK;
        m.epilogue = GT_EPI_NONE;
        m.aux = NULL;
    }
    GT_CHECK(gt_matmul(&s->lt, &m, s->stream, NULL));
    if (pre != NULL) CUDA_CHECK(gt_cu_gelu_backward_inplace(dx, pre, (size_t)N * IC, s->stream));
cleanup:
    return rc;
}

/* dW (IC,OC) += x^T (IC,N) @ dy (N,OC) in fp32 (fresh: dW = ..., the gradients' restart, see
 * grad_restart.c); db (OC) += colsum(dy) if db. x has rows x_ld apart.
 * Bias in the product (GANTRY_BIAS_GEMM, default on): when x is a LayerNorm output (x_ld = IC +
 * GT_CU_LN_PAD: column IC all ones, the rest zeros, see ln_ld) and db directly follows dW in
 * the gradient buffer, the product over all x_ld columns computes db = dy^T 1 as dW's column IC
 * too, with no column-sum pass over dy. (With IC + 1 columns cuBLASLt falls back to kernels 40-70%
 * slower; a multiple of 8 keeps its fast ones.) Its last GT_CU_LN_PAD - 1 columns land on the
 * `spill` floats after db, which must belong to this layer's next tensor, a product-written
 * weight whose own product runs LATER on this stream: they get + 0 (x's zeros times finite dy),
 * or, fresh, 0, which that product then overwrites. */
static int linear_backward_weight(gt_stage *s, float *dW, float *db, const gt_bf16 *dy,
                                  const gt_bf16 *x, int x_ld, size_t spill, int N, int IC,
                                  int OC, int fresh) {
    int rc = GT_OK;
    gt_matmul_args m;
    int fold = db != NULL && s->bias_in_gemm && x_ld == IC + GT_CU_LN_PAD &&
               db == dW + (size_t)IC * OC && spill >= (size_t)(GT_CU_LN_PAD - 1) * OC;
    memset(&m, 0, sizeof(m));
    m.D = dW, m.d_fp32 = 1;
    if (!fresh) m.Cin = dW, m.beta = 1.0f;
    m.A = dy, m.B = x;
    m.m = OC, m.n = fold ? x_ld : IC, m.k = N;
    m.transb = 1;
    m.lda = OC, m.ldb = x_ld, m.ldd = OC;
    GT_CHECK(gt_matmul(&s->lt, &m, s->stream, NULL));
    if (db != NULL && !fold) CUDA_CHECK(gt_cu_bias_backward(db, dy, N, OC, s->colsum, s->stream));
cleanup:
    return rc;
}

/* Batched (over B*NH) column-major product for the reference attention. */
static int batched(gt_stage *s, gt_bf16 *D, const gt_bf16 *A, const gt_bf16 *B, int m, int n,
                   int k, int transa, int transb, int lda, int ldb, int ldd, long long sa,
                   long long sb, long long sd) {
    gt_matmul_args g;
    memset(&g, 0, sizeof(g));
    g.D = D, g.A = A, g.B = B;
    g.m = m, g.n = n, g.k = k;
    g.transa = transa, g.transb = transb;
    g.lda = lda, g.ldb = ldb, g.ldd = ldd;
    g.batch = s->layout.B * s->layout.cfg.n_head;
    g.stride_a = sa, g.stride_b = sb, g.stride_d = sd;
    return gt_matmul(&s->lt, &g, s->stream, NULL);
}

/* ------------------------------------------------------------------------------------------ */
/* attention                                                                                   */

static int attention_forward(gt_stage *s, gt_cu_layer *L) {
    int rc = GT_OK;
    int B = s->layout.B, T = s->layout.T, NH = s->layout.cfg.n_head, C = s->layout.cfg.n_embd;
    int hs = C / NH;
    size_t NC = (size_t)B * T * C;
#ifdef GANTRY_HAVE_CUDNN
    if (s->cudnn != NULL) {
        char err[512];
        if (gt_cudnn_attn_forward(s->cudnn, L->atty, L->stats, L->qkv, B, T, NH, hs, s->stream,
                                  err, sizeof(err)) != 0)
            GT_FAIL(GT_ESTATE, "%s", err);
        goto cleanup;
    }
#endif
    {
        gt_bf16 *q = s->ref_qkv, *k = q + NC, *v = k + NC, *y = v + NC;
        gt_bf16 *pre = s->ref_scores;
        long long ths = (long long)T * hs, tt = (long long)T * T;
        CUDA_CHECK(gt_cu_attn_permute(q, k, v, L->qkv, B, T, NH, hs, s->stream));
        /* pre (T1,T2) row-major = q k^T: col-major (T2,T1) = K^T (T2,hs) @ Q (hs,T1) */
        GT_CHECK(batched(s, pre, k, q, T, T, hs, 1, 0, hs, hs, T, ths, ths, tt));
        CUDA_CHECK(gt_cu_causal_softmax_forward(L->att, pre, 1.0f / sqrtf((float)hs), B * NH, T,
                                                s->stream));
        /* y (T,hs) row-major = att @ v: col-major (hs,T1) = V (hs,T2) @ att (T2,T1) */
        GT_CHECK(batched(s, y, v, L->att, hs, T, T, 0, 0, hs, T, hs, ths, tt, ths));
        CUDA_CHECK(gt_cu_attn_unpermute(L->atty, y, B, T, NH, hs, s->stream));
    }
cleanup:
    return rc;
}

/* dqkv (N,3C) from datty (N,C) */
static int attention_backward(gt_stage *s, gt_cu_layer *L, gt_bf16 *dqkv, const gt_bf16 *datty) {
    int rc = GT_OK;
    int B = s->layout.B, T = s->layout.T, NH = s->layout.cfg.n_head, C = s->layout.cfg.n_embd;
    int hs = C / NH;
    size_t NC = (size_t)B * T * C;
#ifdef GANTRY_HAVE_CUDNN
    if (s->cudnn != NULL) {
        char err[512];
        if (gt_cudnn_attn_backward(s->cudnn, dqkv, datty, L->qkv, L->atty, L->stats, B, T, NH,
                                   hs, s->stream, err, sizeof(err)) != 0)
            GT_FAIL(GT_ESTATE, "%s", err);
        goto cleanup;
    }
#endif
    {
        /* recompute the permuted q, k, v (the forward scratch was reused by later layers) */
        gt_bf16 *q = s->ref_qkv, *k = q + NC, *v = k + NC, *dy = v + NC;
        size_t scores = (size_t)B * NH * T * T;
        gt_bf16 *datt = s->ref_scores, *dpre = s->ref_scores + scores;
        gt_bf16 *dq = s->datty; /* free here: datty was consumed into dy below first */
        long long ths = (long long)T * hs, tt = (long long)T * T;
        CUDA_CHECK(gt_cu_attn_permute(q, k, v, L->qkv, B, T, NH, hs, s->stream));
        CUDA_CHECK(gt_cu_attn_unpermute_backward(dy, datty, B, T, NH, hs, s->stream));
        /* datt (T1,T2) row-major = dy v^T: col-major (T2,T1) = V^T (T2,hs) @ dY (hs,T1) */
        GT_CHECK(batched(s, datt, v, dy, T, T, hs, 1, 0, hs, hs, T, ths, ths, tt));
        CUDA_CHECK(gt_cu_causal_softmax_backward(dpre, datt, L->att, 1.0f / sqrtf((float)hs),
                                                 B * NH, T, s->stream));
        /* dv (T2,hs) = att^T dy: col-major (hs,T2) = dY (hs,T1) @ att^T; v is free now */
        GT_CHECK(batched(s, v, dy, L->att, hs, T, T, 0, 1, hs, T, hs, ths, tt, ths));
        /* dk (T2,hs) = dpre^T q: col-major (hs,T2) = Q (hs,T1) @ dpre^T; into dy (free) */
        GT_CHECK(batched(s, dy, q, dpre, hs, T, T, 0, 1, hs, T, hs, ths, tt, ths));
        /* dq (T1,hs) = dpre k: col-major (hs,T1) = K (hs,T2) @ dpre (T2,T1); into q */
        GT_CHECK(batched(s, q, k, dpre, hs, T, T, 0, 0, hs, T, hs, ths, tt, ths));
        (void)dq;
        CUDA_CHECK(gt_cu_attn_permute_backward(dqkv, q, dy, v, B, T, NH, hs, s->stream));
    }
cleanup:
    return rc;
}

/* ------------------------------------------------------------------------------------------ */
/* forward                                                                                     */

/* Encoder-backward groups of the tokens (host): positions sorted by (token, position), by a
 * stable counting sort over the vocabulary (`count` is V+1 ints of scratch). Linear time: the
 * first stage does this for every micro-batch while the GPU runs the forward it just queued. */
static void build_groups(const int32_t *tokens, size_t N, int V, int32_t *count, int32_t *out,
                         int *n_groups) {
    int32_t *tok = out, *start = out + N, *pos = out + 2 * N + 1;
    int g = 0;
    memset(count, 0, ((size_t)V + 1) * sizeof(int32_t));
    for (size_t i = 0; i < N; i++) count[tokens[i] + 1]++;
    for (int v = 0; v < V; v++) {
        if (count[v + 1] > 0) {
            tok[g] = v;
            start[g] = count[v];
            g++;
        }
        count[v + 1] += count[v]; /* count[v] = first position of token v in the sorted order */
    }
    for (size_t i = 0; i < N; i++) pos[count[tokens[i]]++] = (int32_t)i;
    start[g] = (int32_t)N;
    *n_groups = g;
}

/* out = LayerNorm(res). With resid_ln and a residual `resid` the sum is formed first, in the
 * same pass: res = resid + s->proj (the product just written); otherwise res is read as is. */
static cudaError_t layernorm_of_sum(const gt_stage *s, gt_bf16 *out, int out_ld, float *mean,
                                    float *rstd, gt_bf16 *res, const gt_bf16 *resid,
                                    const gt_bf16 *w, const gt_bf16 *b, int n, int C) {
    if (s->resid_ln && resid != NULL)
        return gt_cu_layernorm_forward_residual(out, out_ld, mean, rstd, res, resid, s->proj, w,
                                                b, n, C, s->stream);
    return gt_cu_layernorm_forward(out, out_ld, mean, rstd, res, w, b, n, C, s->stream);
}

/* The forward's device work: uploads from the staging buffer, encoder or input copy, layers,
 * head + loss (last stage: the mean loss lands in host_loss) or the output copy. Enqueue only
 * (it may be captured into a graph). */
typedef struct {
    gt_stage *s;
    gt_cu_slot *a;
    const float *x_in;
    float *x_out;
} gt_fwd_ctx;

static int forward_body(void *arg) {
    int rc = GT_OK;
    const gt_fwd_ctx *c = arg;
    gt_stage *s = c->s;
    gt_cu_slot *a = c->a;
    size_t N = (size_t)s->layout.B * s->layout.T;
    int B = s->layout.B, T = s->layout.T, C = s->layout.cfg.n_embd;
    int V = s->layout.cfg.vocab_size, Vp = gt_cu_logits_ld(V), n = (int)N;
    const gt_bf16 *P = s->params16;
    cudaStream_t st = s->stream;
    MARK(GT_P_INPUT);
    if (s->layout.is_first)
        CUDA_CHECK(cudaMemcpyAsync(a->tokens, a->staging, N * sizeof(int32_t),
                                   cudaMemcpyHostToDevice, st));
    if (s->layout.is_last)
        CUDA_CHECK(cudaMemcpyAsync(a->targets, a->staging + N, N * sizeof(int32_t),
                                   cudaMemcpyHostToDevice, st));
    if (s->layout.is_first) {
        MARK(GT_P_ENCODER);
        CUDA_CHECK(gt_cu_encoder_forward(a->x0, a->tokens, P + s->layout.tensors[0].offset,
                                         P + s->layout.tensors[1].offset, B, T, C, st));
    } else {
        CUDA_CHECK(cudaMemcpyAsync(a->x0, c->x_in, N * C * sizeof(gt_bf16),
                                   cudaMemcpyDeviceToDevice, st));
    }
    /* With resid_ln each projection writes its product alone into s->proj, and the LayerNorm
     * after it forms the residual sum (res = x + proj) in the same pass over the rows; the last
     * layer's fc-proj sum is formed by ln_f, or by an add kernel before the output is sent.
     * Without it the product adds the residual in its epilogue (beta 1 on a cold operand). */
    const int resid_ln = s->resid_ln;
    for (int l = 0; l < s->layout.nl; l++) {
        gt_cu_layer *L = &a->layers[l];
        gt_bf16 *x = l == 0 ? a->x0 : a->layers[l - 1].res3;
#define W(k) (P + gt_layer_tensor_offset(&s->layout, l, (k)))
        MARK(GT_P_LN);
        /* past layer 0, x is the previous layer's res3 = its res2 + its fc-proj product */
        CUDA_CHECK(layernorm_of_sum(s, L->ln1, ln_ld(s), L->ln1_mean, L->ln1_rstd, x,
                                    l > 0 ? a->layers[l - 1].res2 : NULL, W(GT_LN1_W),
                                    W(GT_LN1_B), n, C));
        MARK(GT_P_QKV);
        GT_CHECK(linear_forward(s, L->qkv, L->ln1, ln_ld(s), W(GT_QKV_W), W(GT_QKV_B), NULL, n, C,
                                3 * C));
        MARK(GT_P_ATTN);
        GT_CHECK(attention_forward(s, L));
        MARK(GT_P_ATTPROJ);
        GT_CHECK(linear_forward(s, resid_ln ? s->proj : L->res2, L->atty, C, W(GT_ATTPROJ_W),
                                W(GT_ATTPROJ_B), resid_ln ? NULL : x, n, C, C));
        MARK(GT_P_LN);
        CUDA_CHECK(layernorm_of_sum(s, L->ln2, ln_ld(s), L->ln2_mean, L->ln2_rstd, L->res2, x,
                                    W(GT_LN2_W), W(GT_LN2_B), n, C));
        MARK(GT_P_FC);
        GT_CHECK(linear_gelu_forward(s, L->fch_gelu, L->fch, L->ln2, ln_ld(s), W(GT_FC_W),
                                     W(GT_FC_B), n, C, 4 * C));
        MARK(GT_P_FCPROJ);
        GT_CHECK(linear_forward(s, resid_ln ? s->proj : L->res3, L->fch_gelu, 4 * C,
                                W(GT_FCPROJ_W), W(GT_FCPROJ_B), resid_ln ? NULL : L->res2, n,
                                4 * C, C));
#undef W
    }
    const int nl = s->layout.nl;
    gt_bf16 *out = nl > 0 ? a->layers[nl - 1].res3 : a->x0;
    if (resid_ln && nl > 0 && !s->layout.is_last)
        CUDA_CHECK(gt_cu_residual_forward(out, a->layers[nl - 1].res2, s->proj, N * C, st));
    if (s->layout.is_last) {
        const gt_bf16 *wte = P + s->layout.tensors[0].offset;
        const gt_bf16 *lnfw = P + s->layout.tensors[s->layout.num_tensors - 2].offset;
        const gt_bf16 *lnfb = P + s->layout.tensors[s->layout.num_tensors - 1].offset;
        gt_matmul_args m;
        MARK(GT_P_LN);
        CUDA_CHECK(layernorm_of_sum(s, a->lnf, C, a->lnf_mean, a->lnf_rstd, out,
                                    nl > 0 ? a->layers[nl - 1].res2 : NULL, lnfw, lnfb, n, C));
        /* logits (N,V) = lnf @ wte^T: col-major (V,N) = wte^T (V,C) @ lnf (C,N), the rows Vp
         * apart (the padded columns are not written; the loss kernels leave them out) */
        memset(&m, 0, sizeof(m));
        m.D = a->logits, m.A = wte, m.B = a->lnf;
        m.m = V, m.n = n, m.k = C;
        m.transa = 1;
        m.lda = C, m.ldb = C, m.ldd = Vp;
        MARK(GT_P_HEAD);
        GT_CHECK(gt_matmul(&s->lt, &m, st, NULL));
        MARK(GT_P_CE);
        if (s->ce_fused) /* the loss and the unscaled logit gradients in one pass */
            CUDA_CHECK(gt_cu_crossentropy_fused(a->losses, a->logits, a->targets, n, V, Vp, st));
        else
            CUDA_CHECK(gt_cu_crossentropy_forward(a->lse, a->losses, a->logits, a->targets, n, V,
                                                  Vp, st));
        CUDA_CHECK(gt_cu_mean(s->loss, a->losses, n, st));
        CUDA_CHECK(cudaMemcpyAsync(s->host_loss, s->loss, sizeof(float), cudaMemcpyDeviceToHost,
                                   st));
    } else {
        MARK(GT_P_OUTPUT);
        CUDA_CHECK(cudaMemcpyAsync(c->x_out, out, N * C * sizeof(gt_bf16),
                                   cudaMemcpyDeviceToDevice, st));
    }
    MARK(GT_P_END);
cleanup:
    return rc;
}

/* What a captured action bakes into its launches besides the slot's own buffers. */
typedef struct {
    int kind;
    float loss_scale;
    const void *p0, *p1;
    cudaStream_t stream;
} gt_graph_key;

static gt_graph_key graph_key(const gt_stage *s, int kind, const void *p0, const void *p1,
                              float loss_scale) {
    gt_graph_key k;
    memset(&k, 0, sizeof(k)); /* padding too: compared with memcmp */
    k.kind = kind, k.loss_scale = loss_scale, k.p0 = p0, k.p1 = p1, k.stream = s->stream;
    return k;
}

int gt_be_forward(gt_stage *s, int slot, const int32_t *tokens, const float *x_in, float *x_out,
                  const int32_t *targets, float *loss_out) {
    int rc = GT_OK;
    {
        size_t N = (size_t)s->layout.B * s->layout.T;
        gt_cu_slot *a = &s->slots[slot];
        cudaStream_t st = s->stream;
        gt_fwd_ctx ctx = {s, a, x_in, x_out};
        gt_graph_key key = graph_key(s, GT_GRAPH_FORWARD, x_in, x_out, 0.0f);
        gt_prof_prefill(&s->prof, st);
        /* host inputs -> pinned staging (the previous upload from it is done) */
        if (s->layout.is_first || s->layout.is_last) {
            CUDA_CHECK(cudaEventSynchronize(a->uploaded));
            if (s->layout.is_first) memcpy(a->staging, tokens, N * sizeof(int32_t));
            if (s->layout.is_last) memcpy(a->staging + N, targets, N * sizeof(int32_t));
        }
        GT_CHECK(gt_graph_run(&a->graphs[GT_GRAPH_FORWARD], &s->graphs_enabled, st, &key,
                              sizeof(key), forward_body, &ctx));
        if (s->layout.is_first) {
            /* the backward's groups: sorted on the host while the GPU runs the queued forward */
            build_groups(tokens, N, s->layout.cfg.vocab_size, s->group_count,
                         a->staging + 2 * N, a->staging + 5 * N + 1);
            CUDA_CHECK(cudaMemcpyAsync(a->groups, a->staging + 2 * N,
                                       (3 * N + 2) * sizeof(int32_t), cudaMemcpyHostToDevice,
                                       st));
        }
        if (s->layout.is_first || s->layout.is_last) CUDA_CHECK(cudaEventRecord(a->uploaded, st));
        if (s->layout.is_last) {
            CUDA_CHECK(cudaStreamSynchronize(st));
            *loss_out = *s->host_loss;
        }
    }
cleanup:
    return rc;
}

/* ------------------------------------------------------------------------------------------ */
/* backward                                                                                    */

/* Gradients of local layer l's activations: with g holding one layer (full backward) index 0 and
 * the residual gradients ping-pong; with g holding all layers, index l. */
static gt_cu_layer_grads *layer_grads(gt_cu_grads *g, int l) {
    return &g->layers[g->n_layers == 1 ? 0 : l];
}
static gt_bf16 *dresid(gt_cu_grads *g, int l) {
    return g->dresid[g->n_resid == 2 ? (l & 1) : l];
}

/* The input gradients of layer l, and its two LayerNorms' weight gradients (computed in the
 * same pass as their input gradients, so the split backward's weight half does not read the
 * LayerNorm inputs again). */
static int layer_backward_input(gt_stage *s, gt_cu_slot *a, gt_cu_grads *g, int l) {
    int rc = GT_OK;
    int n = s->layout.B * s->layout.T, C = s->layout.cfg.n_embd;
    const gt_bf16 *P = s->params16;
    float *Gb = s->buffers[GT_BUF_GRADS];
    gt_cu_layer *L = &a->layers[l];
    gt_cu_layer_grads *G = layer_grads(g, l);
    const gt_bf16 *x = l == 0 ? a->x0 : a->layers[l - 1].res3;
    const gt_bf16 *dout = dresid(g, l + 1);
#define W(k) (P + gt_layer_tensor_offset(&s->layout, l, (k)))
#define DW(k) (Gb + gt_layer_tensor_offset(&s->layout, l, (k)))
    MARK(GT_P_D_FCPROJ);
    GT_CHECK(linear_backward_input(s, G->dfch, dout, W(GT_FCPROJ_W), L->fch, n, 4 * C, C));
    MARK(GT_P_D_FC);
    GT_CHECK(linear_backward_input(s, G->dln2, G->dfch, W(GT_FC_W), NULL, n, C, 4 * C));
    MARK(GT_P_D_LN); /* with the LayerNorm's weight gradients: one pass over dln2 and res2 */
    /* and, with ln_bias_sums, the bias gradients of fc-proj (sum of dout, read here as the
     * residual gradient) and of the attention projection (sum of dres2, written here) */
    CUDA_CHECK(gt_cu_layernorm_backward(
        G->dres2, dout, G->dln2, L->res2, L->ln2_mean, L->ln2_rstd, W(GT_LN2_W), DW(GT_LN2_W),
        DW(GT_LN2_B), s->ln_bias_sums ? DW(GT_FCPROJ_B) : NULL,
        s->ln_bias_sums ? DW(GT_ATTPROJ_B) : NULL, n, C, s->colsum, s->stream));
    MARK(GT_P_D_ATTPROJ);
    GT_CHECK(linear_backward_input(s, s->datty, G->dres2, W(GT_ATTPROJ_W), NULL, n, C, C));
    MARK(GT_P_D_ATTN);
    GT_CHECK(attention_backward(s, L, G->dqkv, s->datty));
    MARK(GT_P_D_QKV);
    GT_CHECK(linear_backward_input(s, G->dln1, G->dqkv, W(GT_QKV_W), NULL, n, C, 3 * C));
    MARK(GT_P_D_LN);
    CUDA_CHECK(gt_cu_layernorm_backward(dresid(g, l), G->dres2, G->dln1, x, L->ln1_mean,
                                        L->ln1_rstd, W(GT_LN1_W), DW(GT_LN1_W), DW(GT_LN1_B),
                                        NULL, NULL, n, C, s->colsum, s->stream));
#undef W
#undef DW
cleanup:
    return rc;
}

/* Elements of tensor k (GT_LN1_W..) of local layer l. */
static size_t layer_tensor_numel(const gt_stage *s, int l, int k) {
    return s->layout.tensors[s->layout.layer_tensor0 + l * GT_TENSORS_PER_LAYER + k].numel;
}

static int layer_backward_weight(gt_stage *s, gt_cu_slot *a, gt_cu_grads *g, int l, int fresh) {
    int rc = GT_OK;
    int n = s->layout.B * s->layout.T, C = s->layout.cfg.n_embd;
    float *Gb = s->buffers[GT_BUF_GRADS];
    gt_cu_layer *L = &a->layers[l];
    gt_cu_layer_grads *G = layer_grads(g, l);
    const gt_bf16 *dout = dresid(g, l + 1);
#define DW(k) (Gb + gt_layer_tensor_offset(&s->layout, l, (k)))
    /* each spilling product before the one whose tensor it spills onto (see above) */
    MARK(GT_P_W_FC); /* spills onto c_proj's weight gradient, next */
    GT_CHECK(linear_backward_weight(s, DW(GT_FC_W), DW(GT_FC_B), G->dfch, L->ln2, ln_ld(s),
                                    layer_tensor_numel(s, l, GT_FCPROJ_W), n, C, 4 * C, fresh));
    MARK(GT_P_W_FCPROJ);
    /* with ln_bias_sums the two bias gradients beside LayerNorm 2 came with its backward */
    GT_CHECK(linear_backward_weight(s, DW(GT_FCPROJ_W), s->ln_bias_sums ? NULL : DW(GT_FCPROJ_B),
                                    dout, L->fch_gelu, 4 * C, 0, n, 4 * C, C, fresh));
    MARK(GT_P_W_QKV); /* spills onto the attention projection's weight gradient, next */
    GT_CHECK(linear_backward_weight(s, DW(GT_QKV_W), DW(GT_QKV_B), G->dqkv, L->ln1, ln_ld(s),
                                    layer_tensor_numel(s, l, GT_ATTPROJ_W), n, C, 3 * C, fresh));
    MARK(GT_P_W_ATTPROJ);
    GT_CHECK(linear_backward_weight(s, DW(GT_ATTPROJ_W), s->ln_bias_sums ? NULL : DW(GT_ATTPROJ_B),
                                    G->dres2, L->atty, C, 0, n, C, C, fresh));
    GT_CHECK(gt_stage_report_layer(&s->layout, l)); /* an armed hook: the layer is enqueued */
#undef DW
cleanup:
    return rc;
}

static int head_backward_input(gt_stage *s, gt_cu_slot *a, gt_cu_grads *g, float loss_scale) {
    int rc = GT_OK;
    int n = s->layout.B * s->layout.T, C = s->layout.cfg.n_embd;
    int V = s->layout.cfg.vocab_size, Vp = gt_cu_logits_ld(V), nl = s->layout.nl;
    const gt_bf16 *P = s->params16;
    float *Gb = s->buffers[GT_BUF_GRADS];
    const gt_bf16 *out = nl > 0 ? a->layers[nl - 1].res3 : a->x0;
    gt_matmul_args m;
    memset(&m, 0, sizeof(m));
    m.scaled = 1, m.alpha = a->dlogits_scale; /* fused: the forward left softmax - onehot */
    if (!s->ce_fused) {
        MARK(GT_P_D_CE);
        CUDA_CHECK(gt_cu_crossentropy_backward(a->logits, a->lse, a->targets,
                                               loss_scale / (float)n, n, V, Vp, s->stream));
    }
    /* dlnf (N,C) = dlogits (N,V) @ wte (V,C): col-major (C,N) = wte (C,V) @ dl (V,N) */
    m.D = g->dlnf, m.A = P + s->layout.tensors[0].offset, m.B = a->logits;
    m.m = C, m.n = n, m.k = V;
    m.lda = C, m.ldb = Vp, m.ldd = C;
    MARK(GT_P_D_HEAD);
    GT_CHECK(gt_matmul(&s->lt, &m, s->stream, NULL));
    MARK(GT_P_D_LN); /* ln_f's input and weight gradients in one pass */
    CUDA_CHECK(gt_cu_layernorm_backward(
        dresid(g, nl), NULL, g->dlnf, out, a->lnf_mean, a->lnf_rstd,
        P + s->layout.tensors[s->layout.num_tensors - 2].offset,
        Gb + s->layout.tensors[s->layout.num_tensors - 2].offset,
        Gb + s->layout.tensors[s->layout.num_tensors - 1].offset, NULL, NULL, n, C, s->colsum,
        s->stream));
cleanup:
    return rc;
}

static int head_backward_weight(gt_stage *s, gt_cu_slot *a, int fresh) {
    int rc = GT_OK;
    int n = s->layout.B * s->layout.T, C = s->layout.cfg.n_embd;
    int V = s->layout.cfg.vocab_size, Vp = gt_cu_logits_ld(V);
    float *Gb = s->buffers[GT_BUF_GRADS];
    gt_matmul_args m;
    /* dwte (V,C) += dlogits^T lnf: col-major (C,V) = lnf (C,N) @ dl^T (N,V): the V real rows */
    memset(&m, 0, sizeof(m));
    m.scaled = 1, m.alpha = a->dlogits_scale;
    m.D = Gb + s->layout.tensors[0].offset, m.d_fp32 = 1;
    if (!(fresh && gt_cu_grads_from_products(s, 0))) m.Cin = m.D, m.beta = 1.0f;
    m.A = a->lnf, m.B = a->logits;
    m.m = C, m.n = V, m.k = n;
    m.transb = 1;
    m.lda = C, m.ldb = Vp, m.ldd = C;
    MARK(GT_P_W_HEAD);
    GT_CHECK(gt_matmul(&s->lt, &m, s->stream, NULL));
    GT_CHECK(gt_stage_report_head(&s->layout));
cleanup:
    return rc;
}

static int encoder_backward(gt_stage *s, gt_cu_slot *a, gt_cu_grads *g) {
    int rc = GT_OK;
    size_t N = (size_t)s->layout.B * s->layout.T;
    float *Gb = s->buffers[GT_BUF_GRADS];
    MARK(GT_P_W_ENCODER);
    /* the group count is read on the device (a captured graph replays with the next tokens) */
    CUDA_CHECK(gt_cu_encoder_backward(Gb + s->layout.tensors[0].offset,
                                      Gb + s->layout.tensors[1].offset, dresid(g, 0), a->groups,
                                      a->groups + N, a->groups + 2 * N + 1, a->groups + 3 * N + 1,
                                      (int)N, s->layout.B, s->layout.T, s->layout.cfg.n_embd,
                                      s->stream));
    GT_CHECK(gt_stage_report_embeddings(&s->layout));
cleanup:
    return rc;
}

/* The backward's device work (enqueue only; may be captured). do_weight: 0 = input gradients
 * only (split), 1 = both, layer by layer (full backward). */
typedef struct {
    gt_stage *s;
    gt_cu_slot *a;
    gt_cu_grads *g;
    const float *dx_out;
    float *dx_in;
    float loss_scale;
    int do_weight;
    int fresh; /* the gradients' restart: the weight products overwrite (grad_restart.c) */
} gt_bwd_ctx;

static int backward_body(void *arg) {
    int rc = GT_OK;
    const gt_bwd_ctx *c = arg;
    gt_stage *s = c->s;
    gt_cu_slot *a = c->a;
    gt_cu_grads *g = c->g;
    size_t NCb = (size_t)s->layout.B * s->layout.T * s->layout.cfg.n_embd * sizeof(gt_bf16);
    if (s->layout.is_last) {
        GT_CHECK(head_backward_input(s, a, g, c->loss_scale));
        if (c->do_weight) GT_CHECK(head_backward_weight(s, a, c->fresh));
    } else {
        MARK(GT_P_INPUT);
        CUDA_CHECK(cudaMemcpyAsync(dresid(g, s->layout.nl), c->dx_out, NCb,
                                   cudaMemcpyDeviceToDevice, s->stream));
    }
    for (int l = s->layout.nl - 1; l >= 0; l--) {
        GT_CHECK(layer_backward_input(s, a, g, l));
        if (c->do_weight) GT_CHECK(layer_backward_weight(s, a, g, l, c->fresh));
    }
    if (!s->layout.is_first) {
        MARK(GT_P_OUTPUT);
        CUDA_CHECK(cudaMemcpyAsync(c->dx_in, dresid(g, 0), NCb, cudaMemcpyDeviceToDevice,
                                   s->stream));
    } else if (c->do_weight) {
        GT_CHECK(encoder_backward(s, a, g));
    }
    MARK(GT_P_END);
cleanup:
    return rc;
}

/* The split backward's weight half (enqueue only; may be captured). */
static int weight_body(void *arg) {
    int rc = GT_OK;
    const gt_bwd_ctx *c = arg;
    gt_stage *s = c->s;
    if (s->layout.is_last) GT_CHECK(head_backward_weight(s, c->a, c->fresh));
    for (int l = s->layout.nl - 1; l >= 0; l--)
        GT_CHECK(layer_backward_weight(s, c->a, c->g, l, c->fresh));
    if (s->layout.is_first) GT_CHECK(encoder_backward(s, c->a, c->g));
    MARK(GT_P_END);
cleanup:
    return rc;
}

/* Runs a weight-producing body through the graph cache, or EAGERLY while the gradients-ready
 * hook is armed (stage.h): the hook is host code between launches (it records events and
 * enqueues the data-parallel all-reduce of finished layers on another stream), which a
 * replayed graph would skip and a capture would wrongly pull into the graph. The eager run
 * neither captures nor replays, and leaves the slot's cached graph as it was. */
static int run_weight_action(gt_stage *s, gt_graph_slot *g, const gt_graph_key *key,
                             gt_graph_body body, void *ctx) {
    if (s->layout.grad_ready != NULL) return body(ctx);
    return gt_graph_run(g, &s->graphs_enabled, s->stream, key, sizeof(*key), body, ctx);
}

/* run_weight_action for a body whose ctx took the stage's fresh flag: the flag is cleared
 * BEFORE the body runs, so an armed hook's AdamW inside it (gt_stage_adamw_range settles a
 * fresh buffer) does not zero the products the body has just written; restored on failure. */
static int run_fresh_aware(gt_stage *s, gt_graph_slot *g, const gt_graph_key *key,
                           gt_graph_body body, gt_bwd_ctx *ctx) {
    s->grads_fresh = 0;
    int rc = run_weight_action(s, g, key, body, ctx);
    if (rc != GT_OK) s->grads_fresh = ctx->fresh;
    return rc;
}

static int run_backward(gt_stage *s, int slot, gt_cu_grads *g, const float *dx_out,
                        float *dx_in, float loss_scale, int do_weight) {
    gt_cu_slot *a = &s->slots[slot];
    int fresh = do_weight && s->grads_fresh;
    gt_bwd_ctx ctx = {s, a, g, dx_out, dx_in, loss_scale, do_weight, fresh};
    int kind = !do_weight ? GT_GRAPH_BACKWARD_INPUT
                          : fresh ? GT_GRAPH_BACKWARD_FRESH : GT_GRAPH_BACKWARD;
    /* the head products' alpha, here and in the weight half (host side: a replayed graph runs
     * no body) */
    a->dlogits_scale = s->ce_fused && s->layout.is_last
                           ? loss_scale / (float)(s->layout.B * s->layout.T) : 1.0f;
    gt_graph_key key = graph_key(s, kind, dx_out, dx_in, loss_scale);
    gt_prof_prefill(&s->prof, s->stream);
    if (!do_weight) /* input gradients report nothing: graphs as always */
        return gt_graph_run(&a->graphs[kind], &s->graphs_enabled, s->stream, &key, sizeof(key),
                            backward_body, &ctx);
    return run_fresh_aware(s, &a->graphs[kind], &key, backward_body, &ctx);
}

int gt_be_backward(gt_stage *s, int slot, const float *dx_out, float *dx_in, float loss_scale) {
    return run_backward(s, slot, &s->shared_grads, dx_out, dx_in, loss_scale, 1);
}

int gt_be_backward_input(gt_stage *s, int slot, void *grads, const float *dx_out, float *dx_in,
                         float loss_scale) {
    return run_backward(s, slot, grads, dx_out, dx_in, loss_scale, 0);
}

int gt_be_backward_weight(gt_stage *s, int slot, void *grads) {
    int rc = GT_OK;
    gt_cu_slot *a = &s->slots[slot];
    int fresh = s->grads_fresh;
    int kind = fresh ? GT_GRAPH_WEIGHT_FRESH : GT_GRAPH_WEIGHT;
    gt_bwd_ctx ctx = {s, a, grads, NULL, NULL, 0.0f, 1, fresh};
    /* a captured head product bakes in the logit gradients' scale */
    gt_graph_key key = graph_key(s, kind, NULL, NULL, a->dlogits_scale);
    gt_prof_prefill(&s->prof, s->stream);
    GT_CHECK(run_fresh_aware(s, &a->graphs[kind], &key, weight_body, &ctx));
cleanup:
    return rc;
}

int gt_be_slot_grads_alloc(gt_stage *s, void **out) {
    int rc = GT_OK;
    gt_cu_grads *g = NULL;
    GT_CALLOC(g, 1);
    GT_CHECK(gt_cu_alloc_grads(s, g, 1));
    *out = g;
    g = NULL;
cleanup:
    gt_be_slot_grads_free(g);
    return rc;
}

void gt_be_slot_grads_free(void *grads) {
    if (grads == NULL) return;
    gt_cu_release_grads(grads);
    free(grads);
}
