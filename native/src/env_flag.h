/*
 * env_flag.h — the native library's environment switches: on/off (GANTRY_DP_OVERLAP,
 * GANTRY_OPT_OVERLAP, ...) and bounded integers (GANTRY_P2P_MAX_CTAS, GANTRY_P2P_CE_SLOTS,
 * GANTRY_GEMM_CANDIDATES, ...). Unset or empty gives the default; anything not allowed is a
 * GT_EINPUT error naming the variable, its value and what is allowed.
 */
#ifndef GANTRY_ENV_FLAG_H
#define GANTRY_ENV_FLAG_H

/* "0" or "1". */
int gt_env_flag(const char *name, int fallback, int *out);

/* A decimal integer in [lo, hi]; `note` (or NULL) is added to the error's list of what is
 * allowed, e.g. "0 = NCCL's default". */
int gt_env_int(const char *name, int lo, int hi, int fallback, const char *note, int *out);

#endif /* GANTRY_ENV_FLAG_H */
