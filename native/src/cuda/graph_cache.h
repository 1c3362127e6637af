/*
 * graph_cache.h — CUDA graphs for the stage's actions (CUDA backend, not public API).
 *
 * An action (forward, backward, ...) of one activation slot queues the same few hundred launches
 * on every micro-batch; replaying them as one captured graph takes the host's launch cost (the
 * cuBLASLt and cuDNN calls) off the GPU's critical path. gt_graph_run runs an action's body
 * eagerly the first time it sees a key (the pointers and scalars the body bakes into its
 * launches; the first run also autotunes and builds every plan), captures it on the next call
 * and replays the graph while the key stays the same. If a capture fails (a call that cannot be
 * captured), graphs are switched off for the stage and the body runs eagerly: never a wrong
 * result, at worst the eager speed. GANTRY_CUDA_GRAPHS=0 switches them off.
 */
#ifndef GANTRY_CUDA_GRAPH_CACHE_H
#define GANTRY_CUDA_GRAPH_CACHE_H

#include <cuda_runtime_api.h>
#include <stddef.h>

#define GT_GRAPH_KEY_BYTES 64

typedef struct {
    cudaGraphExec_t exec; /* NULL until captured */
    unsigned char key[GT_GRAPH_KEY_BYTES];
    int has_key, eager_runs;
} gt_graph_slot;

/* Queues the body's work on `stream`. */
typedef int (*gt_graph_body)(void *ctx);

/* Runs `body` (eagerly, captured, or replayed: see above). *enabled is the stage's switch;
 * key_len <= GT_GRAPH_KEY_BYTES. */
int gt_graph_run(gt_graph_slot *g, int *enabled, cudaStream_t stream, const void *key,
                 size_t key_len, gt_graph_body body, void *ctx);

void gt_graph_release(gt_graph_slot *g);

#endif /* GANTRY_CUDA_GRAPH_CACHE_H */
