/*
 * dp_buckets.c — the bucket coalescing of the overlapped data-parallel all-reduce
 * (see dp_buckets.h).
 */
#include "dp_buckets.h"

#include <stdlib.h>
#include <string.h>

#include "common.h"

void gt_bucketer_reset(gt_bucketer *b, size_t limit, size_t target, gt_bucket_flush_fn flush,
                       void *ctx) {
    memset(b, 0, sizeof(*b));
    b->limit = limit;
    b->target = target;
    b->flush = flush;
    b->ctx = ctx;
}

static int flush_open(gt_bucketer *b) {
    int rc = GT_OK;
    if (b->hi > b->lo) {
        size_t lo = b->lo, count = b->hi - b->lo;
        b->lo = b->hi = 0;
        b->flushed++;
        GT_CHECK(b->flush(b->ctx, lo, count));
    }
cleanup:
    return rc;
}

int gt_bucketer_add(gt_bucketer *b, size_t offset, size_t count) {
    int rc = GT_OK;
    if (count == 0 || offset > b->limit || count > b->limit - offset)
        GT_FAIL(GT_ESTATE, "gradient range [%zu, %zu) is empty or outside the buffer of %zu "
                "elements", offset, offset + count, b->limit);
    b->reported += count;
    if (b->hi > b->lo && offset + count == b->lo) {
        b->lo = offset; /* backward order: the usual case, the range just below */
    } else if (b->hi > b->lo && offset == b->hi) {
        b->hi = offset + count;
    } else {
        GT_CHECK(flush_open(b));
        b->lo = offset;
        b->hi = offset + count;
    }
    if (b->hi - b->lo >= b->target) GT_CHECK(flush_open(b));
cleanup:
    return rc;
}

int gt_bucketer_finish(gt_bucketer *b) {
    int rc = GT_OK;
    GT_CHECK(flush_open(b));
    if (b->reported != b->limit)
        GT_FAIL(GT_ESTATE, "the stage reported %zu ready gradient elements of %zu", b->reported,
                b->limit);
cleanup:
    return rc;
}
