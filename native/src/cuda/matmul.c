/*
 * matmul.c — cuBLASLt wrapper of matmul.h: builds the operation and layout descriptors, asks the
 * heuristic for the best algorithm within the workspace, runs it. Every cuBLASLt call is checked
 * (CUBLAS_CHECK carries the status name and file:line).
 */
#include <stdint.h>
#include <string.h>

#include "cuda/cuda_check.h"
#include "cuda/matmul.h"

#define CUBLAS_CHECK(call)                                                                     \
    do {                                                                                       \
        cublasStatus_t cublas_rc_ = (call);                                                    \
        if (cublas_rc_ != CUBLAS_STATUS_SUCCESS)                                               \
            GT_FAIL(GT_ESTATE, "%s failed: %s", #call, cublasLtGetStatusName(cublas_rc_));     \
    } while (0)

int gt_lt_create(gt_lt *lt, size_t workspace_size) {
    int rc = GT_OK;
    memset(lt, 0, sizeof(*lt));
    CUBLAS_CHECK(cublasLtCreate(&lt->handle));
    CUDA_MALLOC(lt->workspace, workspace_size);
    lt->workspace_size = workspace_size;
cleanup:
    return rc;
}

void gt_lt_destroy(gt_lt *lt) {
    if (lt == NULL) return;
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

int gt_matmul(gt_lt *lt, const gt_matmul_args *a, cudaStream_t stream, int *unsupported) {
    int rc = GT_OK;
    cublasLtMatmulDesc_t op = NULL;
    cublasLtMatrixLayout_t la = NULL, lb = NULL, lc = NULL, ld = NULL;
    cublasLtMatmulPreference_t pref = NULL;
    cublasLtMatmulHeuristicResult_t heur;
    int found = 0;
    if (unsupported) *unsupported = 0;
    cublasOperation_t ta = a->transa ? CUBLAS_OP_T : CUBLAS_OP_N;
    cublasOperation_t tb = a->transb ? CUBLAS_OP_T : CUBLAS_OP_N;
    cudaDataType_t dtype = a->d_fp32 ? CUDA_R_32F : CUDA_R_16BF;
    CUBLAS_CHECK(cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof(ta)));
    CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof(tb)));
    cublasLtEpilogue_t epi = CUBLASLT_EPILOGUE_DEFAULT;
    switch (a->epilogue) {
    case GT_EPI_BIAS: epi = CUBLASLT_EPILOGUE_BIAS; break;
    case GT_EPI_GELU_BIAS: epi = CUBLASLT_EPILOGUE_GELU_AUX_BIAS; break;
    case GT_EPI_DGELU: epi = CUBLASLT_EPILOGUE_DGELU; break;
    default: break;
    }
    CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi,
                                                sizeof(epi)));
    if (a->epilogue == GT_EPI_BIAS || a->epilogue == GT_EPI_GELU_BIAS) {
        cudaDataType_t bias_type = CUDA_R_16BF;
        CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE,
                                                    &bias_type, sizeof(bias_type)));
        CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_BIAS_POINTER,
                                                    &a->bias, sizeof(a->bias)));
    }
    if (a->epilogue == GT_EPI_GELU_BIAS || a->epilogue == GT_EPI_DGELU) {
        int64_t aux_ld = a->ldd;
        cudaDataType_t aux_type = CUDA_R_16BF;
        CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER,
                                                    &a->aux, sizeof(a->aux)));
        CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD,
                                                    &aux_ld, sizeof(aux_ld)));
        CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(
            op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_DATA_TYPE, &aux_type, sizeof(aux_type)));
    }
    /* layouts: stored (rows, cols) of each operand before op() */
    CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&la, CUDA_R_16BF, a->transa ? a->k : a->m,
                                            a->transa ? a->m : a->k, a->lda));
    CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&lb, CUDA_R_16BF, a->transb ? a->n : a->k,
                                            a->transb ? a->k : a->n, a->ldb));
    CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&lc, dtype, a->m, a->n, a->ldd));
    CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&ld, dtype, a->m, a->n, a->ldd));
    if (a->batch > 1) {
        GT_CHECK(set_batch(la, a->batch, a->stride_a));
        GT_CHECK(set_batch(lb, a->batch, a->stride_b));
        GT_CHECK(set_batch(lc, a->batch, a->stride_d));
        GT_CHECK(set_batch(ld, a->batch, a->stride_d));
    }
    CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
    CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(
        pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &lt->workspace_size,
        sizeof(lt->workspace_size)));
    CUBLAS_CHECK(cublasLtMatmulAlgoGetHeuristic(lt->handle, op, la, lb, lc, ld, pref, 1, &heur,
                                                &found));
    if (found == 0) {
        if (unsupported) *unsupported = 1;
        GT_FAIL(GT_ESTATE, "cuBLASLt has no algorithm for m=%d n=%d k=%d transa=%d transb=%d "
                "epilogue=%d d_fp32=%d", a->m, a->n, a->k, a->transa, a->transb, a->epilogue,
                a->d_fp32);
    }
    {
        const float alpha = 1.0f;
        const float beta = a->Cin != NULL ? a->beta : 0.0f;
        const void *cin = a->Cin != NULL ? a->Cin : a->D;
        CUBLAS_CHECK(cublasLtMatmul(lt->handle, op, &alpha, a->A, la, a->B, lb, &beta, cin, lc,
                                    a->D, ld, &heur.algo, lt->workspace, lt->workspace_size,
                                    stream));
    }
cleanup:
    if (pref) cublasLtMatmulPreferenceDestroy(pref);
    if (la) cublasLtMatrixLayoutDestroy(la);
    if (lb) cublasLtMatrixLayoutDestroy(lb);
    if (lc) cublasLtMatrixLayoutDestroy(lc);
    if (ld) cublasLtMatrixLayoutDestroy(ld);
    if (op) cublasLtMatmulDescDestroy(op);
    return rc;
}
