/*
 * graph_cache.c — capture and replay of a stage action's launches (see graph_cache.h).
 */
#include "cuda/graph_cache.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "cuda/cuda_check.h"

void gt_graph_release(gt_graph_slot *g) {
    if (g->exec != NULL) cudaGraphExecDestroy(g->exec);
    memset(g, 0, sizeof(*g));
}

/* Captures the body into g->exec; 0 on success, else the capture is dropped (nothing ran). */
static int capture(gt_graph_slot *g, cudaStream_t stream, gt_graph_body body, void *ctx) {
    cudaGraph_t graph = NULL;
    if (cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal) != cudaSuccess) {
        (void)cudaGetLastError();
        return 1;
    }
    int body_rc = body(ctx);
    cudaError_t end = cudaStreamEndCapture(stream, &graph);
    int ok = body_rc == GT_OK && end == cudaSuccess && graph != NULL &&
             cudaGraphInstantiate(&g->exec, graph, 0) == cudaSuccess;
    if (graph != NULL) cudaGraphDestroy(graph);
    if (!ok) {
        fprintf(stderr, "gantry: warning: CUDA graph capture of a stage action failed (%s%s); "
                "the stage runs without graphs\n", cudaGetErrorName(end),
                body_rc != GT_OK ? ", a call in the action cannot be captured" : "");
        g->exec = NULL;
        (void)cudaGetLastError(); /* capture errors are not sticky; clear the last one */
        return 1;
    }
    return 0;
}

int gt_graph_run(gt_graph_slot *g, int *enabled, cudaStream_t stream, const void *key,
                 size_t key_len, gt_graph_body body, void *ctx) {
    int rc = GT_OK;
    if (!*enabled || key_len > GT_GRAPH_KEY_BYTES) return body(ctx);
    if (!g->has_key || memcmp(g->key, key, key_len) != 0) {
        gt_graph_release(g);
        memcpy(g->key, key, key_len);
        g->has_key = 1;
    }
    if (g->exec == NULL) {
        if (g->eager_runs < 1) { /* first run: plans, autotuning, lazy allocations */
            g->eager_runs++;
            return body(ctx);
        }
        if (capture(g, stream, body, ctx) != 0) {
            *enabled = 0; /* this stage runs eagerly from now on */
            return body(ctx);
        }
    }
    CUDA_CHECK(cudaGraphLaunch(g->exec, stream));
cleanup:
    return rc;
}
