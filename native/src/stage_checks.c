/*
 * stage_checks.c — backend-independent argument checks of the stage API (stage_checks.h).
 */
#include "stage_checks.h"

#include "common.h"

int gt_stage_check_slot_index(const gt_stage_layout *L, int slot, const char *fn) {
    int rc = GT_OK;
    if (L == NULL) GT_INPUT_FAIL("%s: stage is NULL", fn);
    if (slot < 0 || slot >= L->n_slots)
        GT_INPUT_FAIL("%s: slot %d out of range [0, %d)", fn, slot, L->n_slots);
cleanup:
    return rc;
}

int gt_stage_check_slot_state(int slot, int state, int want_state, const char *fn) {
    int rc = GT_OK;
    static const char *const states[] = {"free", "forward done", "input gradient done"};
    if (state != want_state)
        GT_FAIL(GT_ESTATE, "%s: slot %d is '%s', expected '%s'", fn, slot, states[state],
                states[want_state]);
cleanup:
    return rc;
}

static int check_ids(const int32_t *ids, size_t N, int V, const char *what) {
    int rc = GT_OK;
    for (size_t i = 0; i < N; i++)
        if (ids[i] < 0 || ids[i] >= V)
            GT_INPUT_FAIL("%s[%zu] = %d is out of the vocabulary [0, %d)", what, i, (int)ids[i], V);
cleanup:
    return rc;
}

int gt_stage_check_forward_args(const gt_stage_layout *L, const int32_t *tokens,
                                const float *x_in, const float *x_out, const int32_t *targets,
                                const float *loss_out) {
    int rc = GT_OK;
    size_t N = (size_t)L->B * L->T;
    int V = L->cfg.vocab_size;
    if (L->is_first && tokens == NULL) GT_INPUT_FAIL("gt_stage_forward: first stage needs tokens");
    if (!L->is_first && x_in == NULL) GT_INPUT_FAIL("gt_stage_forward: x_in is NULL");
    if (!L->is_last && x_out == NULL) GT_INPUT_FAIL("gt_stage_forward: x_out is NULL");
    if (L->is_last && (targets == NULL || loss_out == NULL))
        GT_INPUT_FAIL("gt_stage_forward: last stage needs targets and loss_out");
    if (L->is_first) GT_CHECK(check_ids(tokens, N, V, "tokens"));
    if (L->is_last) GT_CHECK(check_ids(targets, N, V, "targets"));
cleanup:
    return rc;
}

int gt_stage_check_backward_args(const gt_stage_layout *L, const float *dx_out,
                                 const float *dx_in, const char *fn) {
    int rc = GT_OK;
    if (!L->is_last && dx_out == NULL) GT_INPUT_FAIL("%s: dx_out is NULL on a non-last stage", fn);
    if (!L->is_first && dx_in == NULL) GT_INPUT_FAIL("%s: dx_in is NULL on a non-first stage", fn);
cleanup:
    return rc;
}

int gt_stage_check_range(const gt_stage_layout *L, gt_buffer which, size_t offset, size_t count,
                         const void *host, const char *fn) {
    int rc = GT_OK;
    if (L == NULL || host == NULL) GT_INPUT_FAIL("%s: stage or host pointer is NULL", fn);
    if ((int)which < 0 || (int)which > 3) GT_INPUT_FAIL("%s: bad buffer %d", fn, (int)which);
    if (offset > L->num_params || count > L->num_params - offset)
        GT_INPUT_FAIL("%s: range [%zu, %zu) is outside the buffer of %zu elements", fn, offset,
                      offset + count, L->num_params);
cleanup:
    return rc;
}

int gt_stage_norm_capture_start(gt_stage_layout *L) {
    int rc = GT_OK;
    if (L == NULL) GT_INPUT_FAIL("gt_stage_norm_capture_begin: stage is NULL");
    L->norm_capture = 1;
cleanup:
    return rc;
}

int gt_stage_norm_capture_stop(gt_stage_layout *L, const double *sq) {
    int rc = GT_OK;
    if (L == NULL || sq == NULL) GT_INPUT_FAIL("gt_stage_norm_capture_end: stage or sq is NULL");
    if (!L->norm_capture) GT_FAIL(GT_ESTATE, "gt_stage_norm_capture_end: not capturing");
    L->norm_capture = 0;
cleanup:
    return rc;
}

int gt_stage_check_adamw_range(const gt_stage_layout *L, size_t offset, size_t count,
                               int step_t) {
    int rc = GT_OK;
    if (L == NULL) GT_INPUT_FAIL("gt_stage_adamw_range: stage is NULL");
    if (step_t < 1) GT_INPUT_FAIL("gt_stage_adamw_range: step_t=%d (must be >= 1)", step_t);
    if (offset > L->num_params || count > L->num_params - offset)
        GT_INPUT_FAIL("gt_stage_adamw_range: [%zu, %zu + %zu) is outside the %zu parameters",
                      offset, offset, count, L->num_params);
cleanup:
    return rc;
}
