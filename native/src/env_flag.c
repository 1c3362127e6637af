/*
 * env_flag.c — parsing of the on/off and integer environment switches (env_flag.h).
 */
#include "env_flag.h"

#include <stdlib.h>
#include <string.h>

#include "common.h"

int gt_env_flag(const char *name, int fallback, int *out) {
    int rc = GT_OK;
    const char *env = getenv(name);
    *out = fallback;
    if (env != NULL && env[0] != '\0') {
        if (strcmp(env, "0") != 0 && strcmp(env, "1") != 0)
            GT_INPUT_FAIL("%s='%s' is not allowed (allowed: 0, 1)", name, env);
        *out = env[0] == '1';
    }
cleanup:
    return rc;
}

int gt_env_int(const char *name, int lo, int hi, int fallback, const char *note, int *out) {
    int rc = GT_OK;
    const char *env = getenv(name);
    *out = fallback;
    if (env != NULL && env[0] != '\0') {
        char *end = NULL;
        long v = strtol(env, &end, 10);
        if (*end != '\0' || v < lo || v > hi)
            GT_INPUT_FAIL("%s='%s' is not allowed (an integer %d..%d%s%s)", name, env, lo, hi,
                          note != NULL ? "; " : "", note != NULL ? note : "");
        *out = (int)v;
    }
cleanup:
    return rc;
}
