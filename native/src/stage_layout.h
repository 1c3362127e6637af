/*
 * stage_layout.h — the backend-independent part of a pipeline stage, shared by the CPU build
 * (cpu/stage_cpu.c) and the CUDA build (cuda/stage_cuda.c): which layers the stage owns, its
 * micro-batch geometry, its activation slots' states (stage_slots.h) and its tensor table
 * (Hugging Face GPT-2 names, shapes and element offsets into the four same-layout buffers of
 * stage.h). One table for both backends keeps checkpoints and the
 * executor's wte range identical across them. Not part of the public API.
 *
 * Both backends' struct gt_stage start with a gt_stage_layout member named `layout` (each header
 * asserts it), so gt_stage_layout_of() turns a stage pointer into its layout and the functions of
 * stage_layout.c, stage_checks.c, stage_slots.c and stage_io.c serve either backend.
 */
#ifndef GANTRY_STAGE_LAYOUT_H
#define GANTRY_STAGE_LAYOUT_H

#include <stddef.h>
#include <stdint.h>

#include "gantry/stage.h"

/* Tensors of one transformer block, in buffer order. */
enum {
    GT_LN1_W, GT_LN1_B, GT_QKV_W, GT_QKV_B, GT_ATTPROJ_W, GT_ATTPROJ_B,
    GT_LN2_W, GT_LN2_B, GT_FC_W, GT_FC_B, GT_FCPROJ_W, GT_FCPROJ_B,
    GT_TENSORS_PER_LAYER
};

/* State of an activation slot: forward -> (backward) or forward -> backward_input ->
 * backward_weight. */
enum { GT_SLOT_FREE = 0, GT_SLOT_FORWARD_DONE = 1, GT_SLOT_INPUT_GRAD_DONE = 2 };

typedef struct {
    gt_config cfg;
    int layer_begin, layer_end, nl; /* owned layers [layer_begin, layer_end) and their count */
    int is_first, is_last;
    int B, T, n_slots;              /* micro-batch B x T tokens; activation slots */

    gt_tensor_info *tensors;        /* table, buffer order */
    char *names;                    /* storage of tensor names */
    int num_tensors;
    int layer_tensor0;              /* index of the first layer tensor in the table */
    int has_wte, has_wpe;           /* wte: first or last stage (tensor 0); wpe: first (tensor 1) */
    size_t num_params;              /* elements in each buffer */

    gt_grad_ready_fn grad_ready;    /* armed gradients-ready hook (stage.h), NULL if none */
    void *grad_ready_ctx;
    int norm_capture;               /* gt_stage_norm_capture_begin .. _end (stage_checks.h) */

    int *slot_state;                /* [n_slots] GT_SLOT_* (stage_slots.h) */
    void **slot_grads;              /* [n_slots] the backend's split-backward gradients, or NULL */
} gt_stage_layout;

/* The layout at the start of a stage of either backend (NULL for NULL). */
static inline const gt_stage_layout *gt_stage_layout_of(const gt_stage *s) {
    return (const gt_stage_layout *)(const void *)s;
}

/* Element offset of tensor k (GT_LN1_W..) of local layer l. */
static inline size_t gt_layer_tensor_offset(const gt_stage_layout *L, int l, int k) {
    return L->tensors[L->layer_tensor0 + l * GT_TENSORS_PER_LAYER + k].offset;
}

/* Checks the model configuration (sizes >= 1, n_head divides n_embd); GT_EINPUT naming them. */
int gt_stage_check_config(const gt_config *cfg);

/* Checks a stage's place in the model and its micro-batch geometry against cfg (already checked
 * by gt_stage_check_config): layer range, first/last ends, B, T, n_slots. */
int gt_stage_check_placement(const gt_config *cfg, int layer_begin, int layer_end, int is_first,
                             int is_last, int B, int T, int n_slots);

/* Fills a zeroed layout from checked arguments and builds its tensor table. */
int gt_stage_layout_init(gt_stage_layout *L, const gt_config *cfg, int layer_begin,
                         int layer_end, int is_first, int is_last, int B, int T, int n_slots);

/* Reports to an armed gradients-ready hook (no-ops when disarmed), in backward order: after
 * the head's weight gradients (wte unless the stage is also first, then ln_f), after local
 * layer l's weight gradients, after the encoder's (wte and wpe of a first stage). */
int gt_stage_report_head(const gt_stage_layout *L);
int gt_stage_report_layer(const gt_stage_layout *L, int l);
int gt_stage_report_embeddings(const gt_stage_layout *L);

/* Frees the table (the layout itself belongs to the stage). */
void gt_stage_layout_release(gt_stage_layout *L);

#endif /* GANTRY_STAGE_LAYOUT_H */
