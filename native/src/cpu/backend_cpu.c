/*
 * backend_cpu.c — the backend functions of stage.h (API version 2) for the CPU build: host fp32
 * activations, no streams, buffer copies are memcpy, and gt_stage_save writes straight from the
 * host buffer. The CUDA build has its own (cuda/).
 */
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "cpu/stage_cpu.h"
#include "safetensors.h"
#include "stage_checks.h"

const char *gt_backend_name(void) { return "cpu"; }

const char *gt_stage_backend_info(const gt_stage *stage) {
    (void)stage;
    return "cpu fp32";
}

int gt_stage_activation_dtype(const gt_stage *stage) {
    (void)stage;
    return GT_DTYPE_F32;
}

size_t gt_stage_activation_bytes(const gt_stage *s) {
    if (s == NULL) return 0;
    return (size_t)s->layout.B * (size_t)s->layout.T * (size_t)s->layout.cfg.n_embd * sizeof(float);
}

int gt_stage_alloc_activation(const gt_stage *s, void **out) {
    int rc = GT_OK;
    float *p = NULL;
    if (s == NULL || out == NULL) GT_INPUT_FAIL("gt_stage_alloc_activation: NULL argument");
    *out = NULL;
    GT_CALLOC(p, (size_t)s->layout.B * (size_t)s->layout.T * (size_t)s->layout.cfg.n_embd);
    *out = p;
cleanup:
    return rc;
}

void gt_stage_free_activation(const gt_stage *s, void *ptr) {
    (void)s;
    free(ptr);
}

int gt_stage_set_stream(gt_stage *s, void *stream) {
    (void)stream;
    return s ? GT_OK : gt_set_error(GT_EINPUT, "gt_stage_set_stream: stage is NULL");
}

int gt_stage_synchronize(gt_stage *s) {
    return s ? GT_OK : gt_set_error(GT_EINPUT, "gt_stage_synchronize: stage is NULL");
}

int gt_stage_read_buffer(gt_stage *s, gt_buffer which, size_t offset, size_t count,
                         float *host_dst) {
    int rc = GT_OK;
    GT_CHECK(gt_stage_check_range(gt_stage_layout_of(s), which, offset, count, host_dst,
                                  "gt_stage_read_buffer"));
    memcpy(host_dst, s->buffers[which] + offset, count * sizeof(float));
cleanup:
    return rc;
}

int gt_host_pin(void *ptr, size_t bytes) {
    if (ptr == NULL || bytes == 0)
        return gt_set_error(GT_EINPUT, "gt_host_pin: NULL pointer or 0 bytes");
    return GT_OK;
}

int gt_host_unpin(void *ptr) {
    return ptr ? GT_OK : gt_set_error(GT_EINPUT, "gt_host_unpin: NULL pointer");
}

int gt_stage_write_buffer(gt_stage *s, gt_buffer which, size_t offset, size_t count,
                          const float *host_src) {
    int rc = GT_OK;
    GT_CHECK(gt_stage_check_range(gt_stage_layout_of(s), which, offset, count, host_src,
                                  "gt_stage_write_buffer"));
    memcpy(s->buffers[which] + offset, host_src, count * sizeof(float));
cleanup:
    return rc;
}

int gt_stage_save(const gt_stage *s, const char *path, gt_buffer which) {
    int rc = GT_OK;
    if (s == NULL || path == NULL) GT_INPUT_FAIL("gt_stage_save: stage or path is NULL");
    if ((int)which < 0 || (int)which > 3) GT_INPUT_FAIL("gt_stage_save: bad buffer %d", which);
    GT_CHECK(gt_st_write_f32(path, s->layout.tensors, s->layout.num_tensors, s->buffers[which]));
cleanup:
    return rc;
}

int gt_stage_params_updated(gt_stage *s) {
    return s ? GT_OK : gt_set_error(GT_EINPUT, "gt_stage_params_updated: stage is NULL");
}

int gt_backend_memory(size_t *used_bytes, size_t *total_bytes) {
    if (used_bytes == NULL || total_bytes == NULL)
        return gt_set_error(GT_EINPUT, "gt_backend_memory: NULL argument");
    *used_bytes = 0;
    *total_bytes = 0;
    return GT_OK;
}
