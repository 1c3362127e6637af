/*
 * stage_slots.c — the activation-slot lifecycle shared by both backends (stage_slots.h): slot
 * states, the lazily allocated per-slot gradients and the compute entry points of stage.h.
 */
#include "stage_slots.h"

#include <stdlib.h>

#include "common.h"
#include "stage_checks.h"

int gt_stage_slots_init(gt_stage_layout *L) {
    int rc = GT_OK;
    GT_CALLOC(L->slot_state, L->n_slots);
    GT_CALLOC(L->slot_grads, L->n_slots);
cleanup:
    return rc;
}

void gt_stage_slots_release(gt_stage_layout *L) {
    if (L->slot_grads != NULL)
        for (int i = 0; i < L->n_slots; i++)
            if (L->slot_grads[i] != NULL) gt_be_slot_grads_free(L->slot_grads[i]);
    free(L->slot_grads);
    free(L->slot_state);
    L->slot_grads = NULL;
    L->slot_state = NULL;
}

/* The stage's layout, writable (both backends' struct gt_stage start with it). */
static gt_stage_layout *layout_of(gt_stage *s) { return (gt_stage_layout *)(void *)s; }

/* The stage exists, `slot` is one of its slots and is in state want_state. */
static int check_slot(gt_stage *s, int slot, int want_state, const char *fn) {
    int rc = GT_OK;
    GT_CHECK(gt_stage_check_slot_index(gt_stage_layout_of(s), slot, fn));
    GT_CHECK(gt_stage_check_slot_state(slot, layout_of(s)->slot_state[slot], want_state, fn));
cleanup:
    return rc;
}

int gt_stage_forward(gt_stage *s, int slot, const int32_t *tokens, const float *x_in,
                     float *x_out, const int32_t *targets, float *loss_out) {
    int rc = GT_OK;
    GT_CHECK(check_slot(s, slot, GT_SLOT_FREE, "gt_stage_forward"));
    GT_CHECK(gt_stage_check_forward_args(gt_stage_layout_of(s), tokens, x_in, x_out, targets,
                                         loss_out));
    GT_CHECK(gt_be_forward(s, slot, tokens, x_in, x_out, targets, loss_out));
    layout_of(s)->slot_state[slot] = GT_SLOT_FORWARD_DONE;
cleanup:
    return rc;
}

int gt_stage_backward(gt_stage *s, int slot, const float *dx_out, float *dx_in,
                      float loss_scale) {
    int rc = GT_OK;
    GT_CHECK(check_slot(s, slot, GT_SLOT_FORWARD_DONE, "gt_stage_backward"));
    GT_CHECK(gt_stage_check_backward_args(gt_stage_layout_of(s), dx_out, dx_in,
                                          "gt_stage_backward"));
    layout_of(s)->slot_state[slot] = GT_SLOT_FREE; /* the activations are consumed either way */
    GT_CHECK(gt_be_backward(s, slot, dx_out, dx_in, loss_scale));
cleanup:
    return rc;
}

int gt_stage_backward_input(gt_stage *s, int slot, const float *dx_out, float *dx_in,
                            float loss_scale) {
    int rc = GT_OK;
    GT_CHECK(check_slot(s, slot, GT_SLOT_FORWARD_DONE, "gt_stage_backward_input"));
    GT_CHECK(gt_stage_check_backward_args(gt_stage_layout_of(s), dx_out, dx_in,
                                          "gt_stage_backward_input"));
    gt_stage_layout *L = layout_of(s);
    if (L->slot_grads[slot] == NULL) GT_CHECK(gt_be_slot_grads_alloc(s, &L->slot_grads[slot]));
    GT_CHECK(gt_be_backward_input(s, slot, L->slot_grads[slot], dx_out, dx_in, loss_scale));
    L->slot_state[slot] = GT_SLOT_INPUT_GRAD_DONE;
cleanup:
    return rc;
}

int gt_stage_backward_weight(gt_stage *s, int slot) {
    int rc = GT_OK;
    GT_CHECK(check_slot(s, slot, GT_SLOT_INPUT_GRAD_DONE, "gt_stage_backward_weight"));
    layout_of(s)->slot_state[slot] = GT_SLOT_FREE; /* the activations are consumed either way */
    GT_CHECK(gt_be_backward_weight(s, slot, layout_of(s)->slot_grads[slot]));
cleanup:
    return rc;
}
