/*
 * dp_buckets.h — coalescing of "gradient ready" ranges into data-parallel all-reduce buckets
 * (their switches, GANTRY_DP_OVERLAP and GANTRY_DP_BUCKET_MB, are in runtime_config.h).
 * Backend-neutral (pipeline.c on both builds). Not part of the public API.
 *
 * While the executor runs a chunk's last gradient-producing action, the stage reports element
 * ranges [offset, offset + count) of its flat gradient buffer in backward order as their
 * gradients become final (stage.h, gt_stage_set_grad_ready). The bucketer grows one open
 * bucket, a contiguous range, with each reported range adjacent to it (below or above); a
 * range that is not adjacent, or a bucket that has reached the target size, flushes the open
 * bucket (the flush callback starts its all-reduce). gt_bucketer_finish flushes the rest and
 * checks that the reports covered the whole buffer exactly once (by count and bounds).
 *
 *   buffer (stage.h):  [wte][wpe][layer 0 ... layer nl-1][ln_f]
 *   last stage order:  wte (head), ln_f, layer nl-1, ..., layer 0      -> [wte] [layers..ln_f]
 *   first stage order: layer nl-1, ..., layer 0, wte+wpe (encoder)     -> [wte..layers]
 * (each bracket split further wherever it reaches the target size).
 */
#ifndef GANTRY_DP_BUCKETS_H
#define GANTRY_DP_BUCKETS_H

#include <stddef.h>

/* Starts the all-reduce of elements [offset, offset + count) of the gradient buffer. */
typedef int (*gt_bucket_flush_fn)(void *ctx, size_t offset, size_t count);

typedef struct {
    size_t limit;             /* elements in the gradient buffer */
    size_t target;            /* flush once the open bucket holds >= target elements (0: every
                                 reported range is its own bucket) */
    size_t lo, hi;            /* open bucket [lo, hi); lo == hi: none open */
    size_t reported;          /* elements reported since the reset */
    int flushed;              /* buckets flushed since the reset */
    gt_bucket_flush_fn flush;
    void *ctx;
} gt_bucketer;

/* Starts a pass over a buffer of `limit` elements (target: see above). */
void gt_bucketer_reset(gt_bucketer *b, size_t limit, size_t target, gt_bucket_flush_fn flush,
                       void *ctx);

/* Adds one ready range; GT_ESTATE if it leaves the buffer or is empty. */
int gt_bucketer_add(gt_bucketer *b, size_t offset, size_t count);

/* Flushes the open bucket; GT_ESTATE unless exactly `limit` elements were reported. */
int gt_bucketer_finish(gt_bucketer *b);

#endif /* GANTRY_DP_BUCKETS_H */
