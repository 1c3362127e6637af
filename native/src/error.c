/*
 * error.c — the thread-local last-error message behind gt_last_error().
 */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "common.h"

static _Thread_local char gt_error_message[1024];

const char *gt_last_error(void) { return gt_error_message; }

int gt_api_version(void) { return GT_API_VERSION; }

int gt_set_error(int status, const char *fmt, ...) {
    va_list args;
    va_start(args, fmt);
    vsnprintf(gt_error_message, sizeof(gt_error_message), fmt, args);
    va_end(args);
    return status;
}

void gt_clear_error(void) { gt_error_message[0] = '\0'; }

void gt_append_location(const char *file, int line) {
    size_t used = strlen(gt_error_message);
    if (used < sizeof(gt_error_message))
        snprintf(gt_error_message + used, sizeof(gt_error_message) - used, " (%s:%d)", file, line);
}
