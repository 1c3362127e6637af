/*
 * matmul.h — bf16 matrix products through cuBLASLt with fused epilogues (CUDA backend).
 *
 * Column-major, as cuBLAS: D (m,n) = alpha * op(A) (m,k) @ op(B) (k,n) + beta * Cin, optionally batched
 * with strides. A and B are bf16; Cin/D are bf16 or fp32 (fp32 for accumulating weight
 * gradients into the master-precision gradient buffer with beta = 1). Epilogues: bias (bf16,
 * length m, added to every column), bias + tanh-GELU with the pre-activation written to aux,
 * and dGELU (D *= gelu'(aux)). A row-major (rows, cols) matrix is a column-major (cols, rows)
 * one, which is how stage_cuda.c maps Hugging Face's Conv1D layout onto these calls.
 */
#ifndef GANTRY_CUDA_MATMUL_H
#define GANTRY_CUDA_MATMUL_H

#include <cublasLt.h>
#include <cuda_runtime_api.h>
#include <stddef.h>

/* One cached plan: the descriptors and the heuristic's algorithm for one product shape. The
 * pointers of a call (operands, bias, aux) are not part of it; they are set per call. */
typedef struct gt_lt_plan gt_lt_plan;

#define GT_LT_RETIRED 8

typedef struct {
    cublasLtHandle_t handle;
    void *workspace;       /* device */
    size_t workspace_size; /* bytes */
    gt_lt_plan *plans;     /* cache, [n_plans] of [cap_plans] */
    int n_plans, cap_plans;
    void *scratch;         /* device: outputs of the autotuning launches */
    size_t scratch_size;
    void *retired[GT_LT_RETIRED]; /* outgrown scratch buffers, freed by gt_lt_trim */
    int n_retired;
    /* tuning, set by the stage after gt_lt_create (runtime_config.h; gt_lt_create sets the
     * defaults): autotune GANTRY_GEMM_AUTOTUNE, candidates GANTRY_GEMM_CANDIDATES, tune_log
     * GANTRY_GEMM_TUNE_LOG */
    int autotune, candidates, tune_log;
} gt_lt;

typedef enum {
    GT_EPI_NONE = 0,
    GT_EPI_BIAS = 1,      /* D = AB + beta*Cin + bias */
    GT_EPI_GELU_BIAS = 2, /* aux = AB + bias; D = gelu(aux)  (Cin unused) */
    GT_EPI_DGELU = 3      /* D = (AB) * gelu'(aux)           (Cin unused) */
} gt_epilogue;

typedef struct {
    void *D;
    const void *Cin;   /* NULL: beta is ignored (0) */
    const void *A, *B;
    int m, n, k;
    int transa, transb;
    int lda, ldb, ldd;
    int d_fp32;        /* D and Cin are fp32 (else bf16) */
    float beta;
    int scaled;        /* 0: alpha is 1 (a zeroed struct is a plain product); 1: alpha below */
    float alpha;
    gt_epilogue epilogue;
    const void *bias;  /* bf16 (m) */
    void *aux;         /* bf16 (m,n), ld = ldd */
    int batch;         /* 0 or 1: not batched */
    long long stride_a, stride_b, stride_d;
} gt_matmul_args;

/* Creates the handle and a workspace of `workspace_size` bytes. */
int gt_lt_create(gt_lt *lt, size_t workspace_size);
void gt_lt_destroy(gt_lt *lt);
/* Frees the autotuning scratch (synchronizes the device: call it where no transfer is in
 * flight, e.g. at the optimizer step; tuning after it allocates again). */
void gt_lt_trim(gt_lt *lt);

/* Runs one product on `stream`. The descriptors and the heuristic's choice are built once per
 * distinct shape (m, n, k, transposes, leading dimensions, batch, epilogue, types, beta) and
 * reused: a training step repeats the same few dozen shapes thousands of times. If cuBLASLt has no algorithm for the requested epilogue,
 * returns GT_EINPUT-free status GT_ESTATE with *unsupported = 1 (callers fall back to a plain
 * product plus a kernel); any other failure is GT_ESTATE with the cuBLASLt status and file:line. */
int gt_matmul(gt_lt *lt, const gt_matmul_args *args, cudaStream_t stream, int *unsupported);

#endif /* GANTRY_CUDA_MATMUL_H */
