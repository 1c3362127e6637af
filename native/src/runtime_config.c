/*
 * runtime_config.c — the native library's GANTRY_* switches (runtime_config.h): one table,
 * read and checked in one pass, and described for the run's start event (stage.h).
 */
#include "runtime_config.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "env_flag.h"
#include "gantry/stage.h"

typedef enum { SW_FLAG, SW_INT, SW_CHOICE, SW_MB } sw_kind;

typedef struct {
    const char *name;    /* environment variable */
    sw_kind kind;
    size_t offset;       /* of the field in gt_runtime_config (int; double for SW_MB) */
    double fallback;     /* default (SW_CHOICE: index into choices) */
    int lo, hi;          /* SW_INT, SW_MB: allowed range */
    const char *choices; /* SW_CHOICE: allowed values, '|'-separated, in GT_* enum order */
    const char *note;    /* added to an SW_INT / SW_MB error's list of what is allowed */
} sw_spec;

#define F(field) offsetof(gt_runtime_config, field)
/* The switches, alphabetical. One line each: launcher/native/runtime_config.py parses them. */
static const sw_spec k_switches[] = {
    {"GANTRY_ATTENTION", SW_CHOICE, F(attention), 0, 0, 0, "auto|cudnn|reference", NULL},
    {"GANTRY_ATTN_AUTOTUNE", SW_FLAG, F(attn_autotune), 1, 0, 1, NULL, NULL},
    {"GANTRY_BIAS_GEMM", SW_FLAG, F(bias_gemm), 1, 0, 1, NULL, NULL},
    {"GANTRY_CE_FUSED", SW_FLAG, F(ce_fused), 1, 0, 1, NULL, NULL},
    {"GANTRY_CUDA_GRAPHS", SW_FLAG, F(cuda_graphs), 1, 0, 1, NULL, NULL},
    {"GANTRY_DP_BUCKET_MB", SW_MB, F(dp_bucket_mb), 25, 0, 1048576, NULL, "0 = one bucket per layer"},
    {"GANTRY_DP_MAX_CTAS", SW_INT, F(dp_max_ctas), 8, 0, 64, NULL, "0 = NCCL's default"},
    {"GANTRY_DP_OVERLAP", SW_FLAG, F(dp_overlap), 1, 0, 1, NULL, NULL},
    {"GANTRY_GEMM_AUTOTUNE", SW_FLAG, F(gemm_autotune), 1, 0, 1, NULL, NULL},
    {"GANTRY_GEMM_CANDIDATES", SW_INT, F(gemm_candidates), 8, 1, 32, NULL, NULL},
    {"GANTRY_GEMM_TUNE_LOG", SW_FLAG, F(gemm_tune_log), 0, 0, 1, NULL, NULL},
    {"GANTRY_GRAD_OVERWRITE", SW_FLAG, F(grad_overwrite), 1, 0, 1, NULL, NULL},
    {"GANTRY_LN_BIAS_SUMS", SW_FLAG, F(ln_bias_sums), 1, 0, 1, NULL, NULL},
    {"GANTRY_NORM_CAPTURE", SW_INT, F(norm_capture), 1, 0, 1, NULL, "1 = the norm from the AdamW ranges, 0 = a pass of its own"},
    {"GANTRY_OPT_OVERLAP", SW_INT, F(opt_overlap), 2, 0, 3, NULL, "1 = every rank, 2 = pipeline rank 0 only, 3 = rank 0 and the other ranks' chunks but the last finished, 0 = none"},
    {"GANTRY_P2P_CE_SLOTS", SW_INT, F(p2p_ce_slots), 4, 1, 64, NULL, NULL},
    {"GANTRY_P2P_MAX_CTAS", SW_INT, F(p2p_max_ctas), 4, 0, 64, NULL, "0 = NCCL's default"},
    {"GANTRY_P2P_TRANSPORT", SW_CHOICE, F(p2p_transport), 0, 0, 0, "auto|ce|nccl", NULL},
    {"GANTRY_PROFILE_OPS", SW_CHOICE, F(profile_ops), 0, 0, 0, "0|1|prefill", NULL},
    {"GANTRY_RESID_LN", SW_FLAG, F(resid_ln), 1, 0, 1, NULL, NULL},
};
#undef F
#define N_SWITCHES ((int)(sizeof(k_switches) / sizeof(k_switches[0])))

static int *int_field(gt_runtime_config *rc, const sw_spec *sw) {
    return (int *)(void *)((char *)rc + sw->offset);
}
static double *double_field(gt_runtime_config *rc, const sw_spec *sw) {
    return (double *)(void *)((char *)rc + sw->offset);
}
static int int_value(const gt_runtime_config *rc, const sw_spec *sw) {
    return *(const int *)(const void *)((const char *)rc + sw->offset);
}
static double double_value(const gt_runtime_config *rc, const sw_spec *sw) {
    return *(const double *)(const void *)((const char *)rc + sw->offset);
}

/* Choice i of sw ("a|b|c") into buf; 0 if there is no choice i. */
static int choice_at(const sw_spec *sw, int i, char *buf, size_t cap) {
    const char *p = sw->choices;
    for (int k = 0; k < i; k++) {
        p = strchr(p, '|');
        if (p == NULL) return 0;
        p++;
    }
    size_t n = strcspn(p, "|");
    if (n + 1 > cap) n = cap - 1;
    memcpy(buf, p, n);
    buf[n] = '\0';
    return 1;
}

/* The index of env among sw's choices, else GT_EINPUT listing them ("a, b, c"). */
static int read_choice(const sw_spec *sw, const char *env, int *out) {
    int rc = GT_OK;
    char value[32], allowed[128];
    allowed[0] = '\0';
    for (int i = 0; choice_at(sw, i, value, sizeof(value)); i++) {
        if (strcmp(env, value) == 0) {
            *out = i;
            goto cleanup;
        }
        snprintf(allowed + strlen(allowed), sizeof(allowed) - strlen(allowed), "%s%s",
                 i ? ", " : "", value);
    }
    GT_INPUT_FAIL("%s='%s' is not allowed (allowed: %s)", sw->name, env, allowed);
cleanup:
    return rc;
}

static int read_mb(const sw_spec *sw, const char *env, double *out) {
    int rc = GT_OK;
    char *end = NULL;
    double mb = strtod(env, &end);
    if (*end != '\0' || !isfinite(mb) || mb < sw->lo || mb > sw->hi)
        GT_INPUT_FAIL("%s='%s' is not allowed (a number of MB, %d to %d; %s)", sw->name, env,
                      sw->lo, sw->hi, sw->note);
    *out = mb;
cleanup:
    return rc;
}

static int read_switch(const sw_spec *sw, gt_runtime_config *out) {
    int rc = GT_OK;
    const char *env = getenv(sw->name);
    int set = env != NULL && env[0] != '\0';
    switch (sw->kind) {
    case SW_FLAG:
        GT_CHECK(gt_env_flag(sw->name, (int)sw->fallback, int_field(out, sw)));
        break;
    case SW_INT:
        GT_CHECK(gt_env_int(sw->name, sw->lo, sw->hi, (int)sw->fallback, sw->note,
                            int_field(out, sw)));
        break;
    case SW_CHOICE:
        *int_field(out, sw) = (int)sw->fallback;
        if (set) GT_CHECK(read_choice(sw, env, int_field(out, sw)));
        break;
    case SW_MB:
        *double_field(out, sw) = sw->fallback;
        if (set) GT_CHECK(read_mb(sw, env, double_field(out, sw)));
        break;
    }
cleanup:
    return rc;
}

int gt_runtime_config_read(gt_runtime_config *out) {
    int rc = GT_OK;
    if (out == NULL) GT_INPUT_FAIL("gt_runtime_config_read: out is NULL");
    memset(out, 0, sizeof(*out));
    for (int i = 0; i < N_SWITCHES; i++) {
        if (k_switches[i].kind == SW_MB) *double_field(out, &k_switches[i]) = k_switches[i].fallback;
        else *int_field(out, &k_switches[i]) = (int)k_switches[i].fallback;
    }
    for (int i = 0; i < N_SWITCHES; i++) GT_CHECK(read_switch(&k_switches[i], out));
cleanup:
    return rc;
}

size_t gt_runtime_dp_bucket_elements(const gt_runtime_config *rc) {
    return (size_t)(rc->dp_bucket_mb * 1048576.0 / (double)sizeof(float));
}

int gt_runtime_config_describe(char *buf, size_t cap) {
    int rc = GT_OK;
    gt_runtime_config cfg;
    size_t used = 0;
    if (buf == NULL || cap == 0) GT_INPUT_FAIL("gt_runtime_config_describe: no buffer");
    buf[0] = '\0';
    GT_CHECK(gt_runtime_config_read(&cfg));
    for (int i = 0; i < N_SWITCHES; i++) {
        const sw_spec *sw = &k_switches[i];
        char value[32];
        if (sw->kind == SW_CHOICE) choice_at(sw, int_value(&cfg, sw), value, sizeof(value));
        else if (sw->kind == SW_MB) snprintf(value, sizeof(value), "%g", double_value(&cfg, sw));
        else snprintf(value, sizeof(value), "%d", int_value(&cfg, sw));
        int n = snprintf(buf + used, cap - used, "%s=%s\n", sw->name, value);
        if (n < 0 || (size_t)n >= cap - used)
            GT_INPUT_FAIL("gt_runtime_config_describe: a buffer of %zu bytes is too small", cap);
        used += (size_t)n;
    }
cleanup:
    return rc;
}
