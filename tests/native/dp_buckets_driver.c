/*
 * dp_buckets_driver.c — drives the bucketer of native/src/dp_buckets.c for
 * tests/native/test_dp_buckets.py (built by the test with the C compiler).
 *
 * usage: dp_buckets_driver LIMIT TARGET OFFSET:COUNT...
 * Feeds the ranges in order, then finishes; prints one "bucket OFFSET COUNT" line per flush,
 * in flush order, and "ok" at the end; on a failure prints "error MESSAGE" and exits 1.
 * Its switches (runtime_config.h): dp_buckets_driver --env prints "overlap N elements N" (or
 * error).
 */
#include <stdio.h>
#include <stdlib.h>

#include "dp_buckets.h"
#include "gantry/stage.h"
#include "runtime_config.h"

static int print_bucket(void *ctx, size_t offset, size_t count) {
    (void)ctx;
    printf("bucket %zu %zu\n", offset, count);
    return GT_OK;
}

int main(int argc, char **argv) {
    gt_bucketer b;
    if (argc == 2 && argv[1][0] == '-') {
        gt_runtime_config rc;
        if (gt_runtime_config_read(&rc) != GT_OK) {
            printf("error %s\n", gt_last_error());
            return 1;
        }
        printf("overlap %d elements %zu\n", rc.dp_overlap, gt_runtime_dp_bucket_elements(&rc));
        return 0;
    }
    if (argc < 3) {
        fprintf(stderr, "usage: %s LIMIT TARGET OFFSET:COUNT...\n", argv[0]);
        return 2;
    }
    gt_bucketer_reset(&b, strtoull(argv[1], NULL, 10), strtoull(argv[2], NULL, 10), print_bucket,
                      NULL);
    for (int i = 3; i < argc; i++) {
        unsigned long long offset = 0, count = 0;
        if (sscanf(argv[i], "%llu:%llu", &offset, &count) != 2) {
            fprintf(stderr, "bad range '%s'\n", argv[i]);
            return 2;
        }
        if (gt_bucketer_add(&b, (size_t)offset, (size_t)count) != GT_OK) {
            printf("error %s\n", gt_last_error());
            return 1;
        }
    }
    if (gt_bucketer_finish(&b) != GT_OK) {
        printf("error %s\n", gt_last_error());
        return 1;
    }
    printf("ok\n");
    return 0;
}
