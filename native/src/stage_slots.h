/*
 * stage_slots.h — the activation-slot lifecycle of a pipeline stage, one for both backends:
 * the slot states (GT_SLOT_* of stage_layout.h), the per-slot activation gradients of the
 * zero-bubble split (allocated on a slot's first backward_input) and the four compute entry
 * points of stage.h (gt_stage_forward, _backward, _backward_input, _backward_weight), which
 * check their arguments and the slot's state here and call the backend's hooks below
 * (cpu/stage_cpu.c, cuda/compute_cuda.c) for the work. Not part of the public API.
 *
 * Transitions: forward FREE -> FORWARD_DONE (on success); backward FORWARD_DONE -> FREE;
 * backward_input FORWARD_DONE -> INPUT_GRAD_DONE (on success); backward_weight
 * INPUT_GRAD_DONE -> FREE. backward and backward_weight consume the slot's activations whether
 * the work succeeds or not, so the slot is free once they pass their checks.
 */
#ifndef GANTRY_STAGE_SLOTS_H
#define GANTRY_STAGE_SLOTS_H

#include <stdint.h>

#include "gantry/stage.h"
#include "stage_layout.h"

/* Allocates the slot table of a layout with n_slots set (every slot FREE, no gradients). */
int gt_stage_slots_init(gt_stage_layout *L);

/* Frees the per-slot gradients (gt_be_slot_grads_free) and the table; safe on a partly built
 * layout. */
void gt_stage_slots_release(gt_stage_layout *L);

/* ---- the backend's hooks: called after the checks, with a valid slot in the right state ---- */

/* The forward of stage.h into `slot` (arguments checked by gt_stage_check_forward_args). */
int gt_be_forward(gt_stage *s, int slot, const int32_t *tokens, const float *x_in, float *x_out,
                  const int32_t *targets, float *loss_out);
/* The full backward of `slot`: input and weight gradients, through the backend's own shared
 * activation gradients. */
int gt_be_backward(gt_stage *s, int slot, const float *dx_out, float *dx_in, float loss_scale);
/* The input half of `slot` into `grads` (from gt_be_slot_grads_alloc), kept for the weight
 * half. */
int gt_be_backward_input(gt_stage *s, int slot, void *grads, const float *dx_out, float *dx_in,
                         float loss_scale);
/* The weight half of `slot` from the `grads` its backward_input left. */
int gt_be_backward_weight(gt_stage *s, int slot, void *grads);
/* One slot's activation gradients for the split backward (every layer kept). */
int gt_be_slot_grads_alloc(gt_stage *s, void **out);
void gt_be_slot_grads_free(void *grads);

#endif /* GANTRY_STAGE_SLOTS_H */
