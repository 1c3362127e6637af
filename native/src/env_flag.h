/*
 * env_flag.h — the native library's on/off environment switches (GANTRY_DP_OVERLAP,
 * GANTRY_OPT_OVERLAP, ...): unset or empty gives the default, "0" / "1" set it, anything else
 * is a GT_EINPUT error naming the variable, its value and what is allowed.
 */
#ifndef GANTRY_ENV_FLAG_H
#define GANTRY_ENV_FLAG_H

int gt_env_flag(const char *name, int fallback, int *out);

#endif /* GANTRY_ENV_FLAG_H */
