/*
 * stage_checks.h — argument checks of the stage API calls that do not depend on the backend
 * (slot index and state, forward / backward inputs, buffer ranges), shared by the CPU and CUDA
 * builds so both reject the same calls with the same messages. `fn` names the API function.
 */
#ifndef GANTRY_STAGE_CHECKS_H
#define GANTRY_STAGE_CHECKS_H

#include <stddef.h>
#include <stdint.h>

#include "gantry/stage.h"
#include "stage_layout.h"

/* L is not NULL (the stage exists) and 0 <= slot < n_slots. */
int gt_stage_check_slot_index(const gt_stage_layout *L, int slot, const char *fn);

/* The slot's state (GT_SLOT_*) is want_state, else GT_ESTATE naming both. */
int gt_stage_check_slot_state(int slot, int state, int want_state, const char *fn);

/* gt_stage_forward's inputs: tokens on the first stage, x_in / x_out between stages, targets and
 * loss_out on the last, token and target ids inside the vocabulary. */
int gt_stage_check_forward_args(const gt_stage_layout *L, const int32_t *tokens,
                                const float *x_in, const float *x_out, const int32_t *targets,
                                const float *loss_out);

/* dx_out on a non-last stage, dx_in on a non-first stage. */
int gt_stage_check_backward_args(const gt_stage_layout *L, const float *dx_out,
                                 const float *dx_in, const char *fn);

/* A host copy of count elements at `offset` of buffer `which`: the stage and host pointer exist,
 * `which` is a buffer and the range lies inside it. */
int gt_stage_check_range(const gt_stage_layout *L, gt_buffer which, size_t offset, size_t count,
                         const void *host, const char *fn);

/* The capture state of gt_stage_norm_capture_begin / _end, shared by both backends: _begin
 * (re)starts it; _end checks its arguments and that a capture runs, and ends it. */
int gt_stage_norm_capture_start(gt_stage_layout *L);
int gt_stage_norm_capture_stop(gt_stage_layout *L, const double *sq);

/* gt_stage_adamw_range's arguments: a stage, step_t >= 1, the range inside the buffers. */
int gt_stage_check_adamw_range(const gt_stage_layout *L, size_t offset, size_t count,
                               int step_t);

#endif /* GANTRY_STAGE_CHECKS_H */
