/*
 * gantry_native_check.c — standalone check of the native library: loads safetensors weights and
 * a token shard, runs the model as a chain of K in-process stages (forward 0..K-1, backward in
 * reverse), prints the loss, optionally dumps gradients and takes AdamW steps.
 *
 *   gantry-native-check --vocab V --seq maxT --layers L --heads NH --embd C --batch B --tokens T
 *                       --weights W.safetensors --data SHARD [--offset O] [--stages K]
 *                       [--steps N] [--lr LR] [--grads-out PATH]
 * Prints one line "step <i> loss <loss> norm <grad norm>" per step. Exit status: 0 ok, 2 bad
 * input (message on stderr), 1 other failures.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gantry/stage.h"

#define CHECK(call)                                                                            \
    do {                                                                                       \
        int check_rc_ = (call);                                                                \
        if (check_rc_ != GT_OK) {                                                              \
            fprintf(stderr, "error: %s\n", gt_last_error());                                   \
            rc = check_rc_ == GT_EINPUT ? 2 : 1;                                               \
            goto cleanup;                                                                      \
        }                                                                                      \
    } while (0)

#define MAX_STAGES 64

static int parse_int(const char *flag, const char *value, int *out) {
    char *end = NULL;
    long v = strtol(value, &end, 10);
    if (end == value || *end != '\0' || v < 0 || v > 1000000000) {
        fprintf(stderr, "error: %s: '%s' is not allowed (expected a non-negative integer)\n", flag,
                value);
        return 0;
    }
    *out = (int)v;
    return 1;
}

int main(int argc, char **argv) {
    int rc = 0;
    gt_config cfg = {0};
    int B = 0, T = 0, K = 1, steps = 1, offset = 0;
    double lr = 0.0;
    const char *weights = NULL, *data = NULL, *grads_out = NULL;
    gt_stage *stages[MAX_STAGES] = {0};
    uint16_t *shard = NULL;
    size_t ntok = 0;
    int32_t *tokens = NULL, *targets = NULL;
    float *acts[MAX_STAGES + 1] = {0}, *grads[MAX_STAGES + 1] = {0};

    for (int i = 1; i < argc; i++) {
        const char *flag = argv[i];
        const char *value = i + 1 < argc ? argv[i + 1] : NULL;
        int ok = value != NULL;
        if (!ok) {
            fprintf(stderr, "error: %s needs a value\n", flag);
            return 2;
        }
        if (strcmp(flag, "--vocab") == 0) ok = parse_int(flag, value, &cfg.vocab_size);
        else if (strcmp(flag, "--seq") == 0) ok = parse_int(flag, value, &cfg.max_seq_len);
        else if (strcmp(flag, "--layers") == 0) ok = parse_int(flag, value, &cfg.n_layer);
        else if (strcmp(flag, "--heads") == 0) ok = parse_int(flag, value, &cfg.n_head);
        else if (strcmp(flag, "--embd") == 0) ok = parse_int(flag, value, &cfg.n_embd);
        else if (strcmp(flag, "--batch") == 0) ok = parse_int(flag, value, &B);
        else if (strcmp(flag, "--tokens") == 0) ok = parse_int(flag, value, &T);
        else if (strcmp(flag, "--stages") == 0) ok = parse_int(flag, value, &K);
        else if (strcmp(flag, "--steps") == 0) ok = parse_int(flag, value, &steps);
        else if (strcmp(flag, "--offset") == 0) ok = parse_int(flag, value, &offset);
        else if (strcmp(flag, "--lr") == 0) lr = atof(value);
        else if (strcmp(flag, "--weights") == 0) weights = value;
        else if (strcmp(flag, "--data") == 0) data = value;
        else if (strcmp(flag, "--grads-out") == 0) grads_out = value;
        else {
            fprintf(stderr, "error: unknown flag '%s'\n", flag);
            return 2;
        }
        if (!ok) return 2;
        i++;
    }
    if (weights == NULL || data == NULL || B < 1 || T < 1) {
        fprintf(stderr, "error: --weights, --data, --batch and --tokens are required\n");
        return 2;
    }
    if (K < 1 || K > MAX_STAGES || K > cfg.n_layer) {
        fprintf(stderr, "error: --stages %d is not allowed (expected 1..min(%d, layers))\n", K,
                MAX_STAGES);
        return 2;
    }

    CHECK(gt_shard_read(data, &shard, &ntok));
    size_t N = (size_t)B * T;
    if ((size_t)offset + N + 1 > ntok) {
        fprintf(stderr, "error: %s: %zu tokens, need %zu from offset %d\n", data, ntok, N + 1,
                offset);
        rc = 2;
        goto cleanup;
    }
    tokens = malloc(N * sizeof(int32_t));
    targets = malloc(N * sizeof(int32_t));
    if (tokens == NULL || targets == NULL) {
        fprintf(stderr, "error: out of memory\n");
        rc = 1;
        goto cleanup;
    }
    for (size_t i = 0; i < N; i++) {
        tokens[i] = shard[offset + i];
        targets[i] = shard[offset + i + 1];
    }
    /* stage k owns layers [k*L/K, (k+1)*L/K) */
    for (int k = 0; k < K; k++) {
        int begin = k * cfg.n_layer / K, end = (k + 1) * cfg.n_layer / K;
        CHECK(gt_stage_create(&cfg, begin, end, k == 0, k == K - 1, B, T, 1, &stages[k]));
        CHECK(gt_stage_load(stages[k], weights, GT_BUF_PARAMS));
    }
    for (int k = 0; k <= K; k++) {
        acts[k] = calloc(N * (size_t)cfg.n_embd, sizeof(float));
        grads[k] = calloc(N * (size_t)cfg.n_embd, sizeof(float));
        if (acts[k] == NULL || grads[k] == NULL) {
            fprintf(stderr, "error: out of memory\n");
            rc = 1;
            goto cleanup;
        }
    }
    for (int step = 0; step < steps; step++) {
        float loss = 0.0f;
        for (int k = 0; k < K; k++) CHECK(gt_stage_zero_grad(stages[k]));
        /* activation acts[k] enters stage k; grads[k] is its gradient */
        for (int k = 0; k < K; k++)
            CHECK(gt_stage_forward(stages[k], 0, tokens, acts[k], acts[k + 1], targets, &loss));
        for (int k = K - 1; k >= 0; k--)
            CHECK(gt_stage_backward(stages[k], 0, grads[k + 1], grads[k], 1.0f));
        if (K > 1) { /* tied embedding: sum the two wte gradients into both copies */
            size_t off0, cnt0, offL, cntL;
            gt_stage_wte_range(stages[0], &off0, &cnt0);
            gt_stage_wte_range(stages[K - 1], &offL, &cntL);
            float *g0 = gt_stage_buffer(stages[0], GT_BUF_GRADS) + off0;
            float *gL = gt_stage_buffer(stages[K - 1], GT_BUF_GRADS) + offL;
            for (size_t i = 0; i < cnt0; i++) g0[i] = gL[i] = g0[i] + gL[i];
        }
        double sq = 0.0;
        for (int k = 0; k < K; k++) {
            double part = 0.0;
            CHECK(gt_stage_grad_sq_sum(stages[k], !(K > 1 && k == K - 1), &part));
            sq += part;
        }
        double norm = sqrt(sq);
        printf("step %d loss %.9g norm %.9g\n", step, (double)loss, norm);
        fflush(stdout);
        if (grads_out != NULL && step == 0)
            for (int k = 0; k < K; k++) {
                char path[4096];
                if (K == 1) snprintf(path, sizeof(path), "%s", grads_out);
                else snprintf(path, sizeof(path), "%s.%d", grads_out, k);
                CHECK(gt_stage_save(stages[k], path, GT_BUF_GRADS));
            }
        float coef = gt_clip_coef(norm, 1.0);
        for (int k = 0; k < K; k++)
            CHECK(gt_stage_adamw_step(stages[k], (float)lr, 0.9f, 0.95f, 1e-8f, 0.1f, step + 1,
                                      coef));
    }
cleanup:
    for (int k = 0; k < K && k < MAX_STAGES; k++) gt_stage_free(stages[k]);
    for (int k = 0; k <= K && k <= MAX_STAGES; k++) {
        free(acts[k]);
        free(grads[k]);
    }
    free(tokens);
    free(targets);
    gt_free(shard);
    return rc;
}
