/*
 * gantry_cuda_smoke.c — smallest end-to-end check of the CUDA backend without Python: one
 * stage of a tiny model, forward + backward of one micro-batch, prints the backend info, the
 * loss (about ln V for zero weights) and the gradient norm. Exit 0 ok, 1 failure.
 *   gantry-cuda-smoke [V C NH L T B]
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "gantry/stage.h"

#define CHECK(call)                                                                            \
    do {                                                                                       \
        if ((call) != GT_OK) {                                                                 \
            fprintf(stderr, "error: %s: %s\n", #call, gt_last_error());                        \
            rc = 1;                                                                            \
            goto cleanup;                                                                      \
        }                                                                                      \
    } while (0)

int main(int argc, char **argv) {
    int rc = 0;
    gt_stage *s = NULL;
    int32_t *tok = NULL, *tgt = NULL;
    int v[6] = {256, 64, 4, 2, 64, 2};
    for (int i = 0; i < 6 && i + 1 < argc; i++) v[i] = atoi(argv[i + 1]);
    gt_config cfg = {v[0], v[4], v[3], v[2], v[1]};
    int T = v[4], B = v[5];
    float loss = 0.0f;
    double sq = 0.0;
    tok = calloc((size_t)B * T, sizeof(int32_t));
    tgt = calloc((size_t)B * T, sizeof(int32_t));
    if (tok == NULL || tgt == NULL) return 1;
    for (int i = 0; i < B * T; i++) {
        tok[i] = (i * 7) % cfg.vocab_size;
        tgt[i] = (i * 13 + 1) % cfg.vocab_size;
    }
    CHECK(gt_stage_create(&cfg, 0, cfg.n_layer, 1, 1, B, T, 1, &s));
    printf("backend %s: %s\n", gt_backend_name(), gt_stage_backend_info(s));
    CHECK(gt_stage_forward(s, 0, tok, NULL, NULL, tgt, &loss));
    CHECK(gt_stage_backward(s, 0, NULL, NULL, 1.0f));
    CHECK(gt_stage_grad_sq_sum(s, 1, &sq));
    printf("loss %.6f (ln V = %.6f) grad norm %.6g\n", loss, log((double)cfg.vocab_size),
           sqrt(sq));
cleanup:
    gt_stage_free(s);
    free(tok);
    free(tgt);
    return rc;
}
