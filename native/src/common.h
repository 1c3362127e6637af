/*
 * common.h — error reporting and check macros shared by the native library.
 *
 * Functions return GT_OK or a GT_E* status and record a message with gt_set_error(). Internal
 * failures (allocation, OS calls) carry file:line; user-facing input errors name file and tensor.
 * Each function has one cleanup path: set `rc` through the macros below and `goto cleanup`.
 */
#ifndef GANTRY_COMMON_H
#define GANTRY_COMMON_H

#include <stddef.h>

#include "gantry/stage.h"

/* Records the message of the current failure (printf format) and returns `status`. */
int gt_set_error(int status, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void gt_clear_error(void);

/* Fails the current function with `status` and a message that carries file:line. */
#define GT_FAIL(status, ...)                                                                   \
    do {                                                                                       \
        rc = gt_set_error((status), __VA_ARGS__);                                              \
        gt_append_location(__FILE__, __LINE__);                                                \
        goto cleanup;                                                                          \
    } while (0)

/* Fails with a user-input error (no file:line: the message names the user's file/tensor). */
#define GT_INPUT_FAIL(...)                                                                     \
    do {                                                                                       \
        rc = gt_set_error(GT_EINPUT, __VA_ARGS__);                                             \
        goto cleanup;                                                                          \
    } while (0)

/* Runs a call that returns a status; on failure keeps its message and jumps to cleanup. */
#define GT_CHECK(call)                                                                         \
    do {                                                                                       \
        rc = (call);                                                                           \
        if (rc != GT_OK) goto cleanup;                                                         \
    } while (0)

/* Allocates `count` zeroed elements of *ptr's type into ptr, or fails with GT_ENOMEM. */
#define GT_CALLOC(ptr, count)                                                                  \
    do {                                                                                       \
        size_t gt_count_ = (size_t)(count);                                                    \
        (ptr) = calloc(gt_count_ ? gt_count_ : 1, sizeof(*(ptr)));                             \
        if ((ptr) == NULL)                                                                     \
            GT_FAIL(GT_ENOMEM, "out of memory allocating %zu bytes", gt_count_ * sizeof(*(ptr))); \
    } while (0)

void gt_append_location(const char *file, int line);

#endif /* GANTRY_COMMON_H */
