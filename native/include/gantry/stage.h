/*
 * gantry/stage.h — the per-stage GPT-2 model API that the pipeline executor drives.
 *
 * One `gt_stage` owns a contiguous range of transformer layers [layer_begin, layer_end) of a
 * GPT-2 model. The first stage also owns the embeddings (wte, wpe); the last stage also owns the
 * final LayerNorm (ln_f) and the output head, which is tied to wte: a last stage that is not also
 * the first holds its OWN copy of wte (the executor all-reduces the two wte gradients between the
 * first and last stage, as Megatron does). A stage that is both first and last holds one wte.
 *
 * Model (exactly GPT-2): learned position embeddings; pre-LayerNorm blocks
 *   x = x + c_proj(attn(c_attn(ln_1(x))));  x = x + mlp.c_proj(gelu_tanh(mlp.c_fc(ln_2(x))))
 * causal self-attention with fused qkv, biases everywhere, ln_f, logits = ln_f(x) @ wte^T,
 * LayerNorm eps 1e-5, mean cross-entropy over the B*T positions of a micro-batch. fp32.
 *
 * Buffers: parameters, gradients and the two AdamW moments are each ONE contiguous fp32 buffer
 * with the same layout (see gt_stage_tensor), so the executor can all-reduce all gradients in one
 * call. Layout of a stage's buffer, in this order:
 *   [wte (V,C) if first or last] [wpe (maxT,C) if first]
 *   per owned layer: ln_1.weight (C) ln_1.bias (C) attn.c_attn.weight (C,3C) attn.c_attn.bias (3C)
 *                    attn.c_proj.weight (C,C) attn.c_proj.bias (C) ln_2.weight (C) ln_2.bias (C)
 *                    mlp.c_fc.weight (C,4C) mlp.c_fc.bias (4C) mlp.c_proj.weight (4C,C)
 *                    mlp.c_proj.bias (C)
 *   [ln_f.weight (C) ln_f.bias (C) if last]
 * Linear weights use Hugging Face's Conv1D layout (in_features, out_features): y = x @ W + b.
 *
 * Activation slots: forward(slot) keeps what backward needs in slot `slot` (0 <= slot < n_slots);
 * the slot is busy until its backward (or backward_weight) has run. n_slots is the schedule's
 * peak number of micro-batches in flight on this stage.
 *
 * Errors: every function that can fail returns GT_OK (0) or a nonzero GT_E* status and sets a
 * thread-local message readable with gt_last_error(). Bad input (wrong tensor names, shapes,
 * dtypes, truncated files) returns GT_EINPUT with a message naming the file and tensor; the
 * Python side turns it into `error: ...` (exit 2). The library never exits the process.
 *
 * Determinism: with the same thread count every function is bit-reproducible run to run
 * (reductions use a fixed partition and a fixed summation order; no atomics).
 *
 * API stability: the pipeline executor and the CUDA backend build on this header; change it only
 * additively.
 */
#ifndef GANTRY_STAGE_H
#define GANTRY_STAGE_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Symbols of the shared library's API (everything else in the library is hidden). */
#if defined(__GNUC__)
#define GT_API __attribute__((visibility("default")))
#else
#define GT_API
#endif

/* ------------------------------------------------------------------------------------------ */
/* status codes and errors                                                                     */

#define GT_OK 0
#define GT_EINPUT 2   /* bad user input: file/tensor/shape/argument; message names it */
#define GT_ENOMEM 3   /* allocation failed */
#define GT_EIO 4      /* an OS read/write failed (message has the path and strerror) */
#define GT_ESTATE 5   /* API misuse: e.g. backward on a slot without a forward */

/* Message of the last failure in this thread ("" if none). Valid until the next failing call. */
GT_API const char *gt_last_error(void);

/* Version of this API; bumped when functions are added. */
#define GT_API_VERSION 8
GT_API int gt_api_version(void);

/* ------------------------------------------------------------------------------------------ */
/* model configuration                                                                         */

typedef struct {
    int vocab_size;  /* V: rows of wte, the model's real vocabulary (any V >= 1 on every
                        backend; the loss is a softmax over exactly these V rows: a backend that
                        wants wider rows pads its logits inside, never wte) */
    int max_seq_len; /* maxT: rows of wpe */
    int n_layer;     /* L: transformer blocks of the whole model */
    int n_head;      /* NH: attention heads; must divide n_embd (head size may be odd) */
    int n_embd;      /* C: channels */
} gt_config;

/* ------------------------------------------------------------------------------------------ */
/* stage lifetime                                                                              */

typedef struct gt_stage gt_stage;

/* Creates a stage owning layers [layer_begin, layer_end) (may be empty if the stage is first or
 * last) for micro-batches of B sequences of T tokens (1 <= T <= max_seq_len), with n_slots
 * activation slots. Parameters start at zero (load or set them), grads and moments at zero.
 * On success *out is the new stage; on failure *out is NULL. */
GT_API int gt_stage_create(const gt_config *cfg, int layer_begin, int layer_end, int is_first,
                    int is_last, int B, int T, int n_slots, gt_stage **out);
GT_API void gt_stage_free(gt_stage *stage); /* NULL is fine */

/* ------------------------------------------------------------------------------------------ */
/* buffers                                                                                     */

/* Which of the four same-layout buffers. */
typedef enum {
    GT_BUF_PARAMS = 0,
    GT_BUF_GRADS = 1,
    GT_BUF_ADAM_M = 2, /* AdamW first moment (exp_avg) */
    GT_BUF_ADAM_V = 3  /* AdamW second moment (exp_avg_sq) */
} gt_buffer;

/* Base pointer, NULL if bad `which` (GT_BUF_GRADS: the gradients read as restarted, see
 * gt_stage_start_accumulation). */
GT_API float *gt_stage_buffer(gt_stage *stage, gt_buffer which);
GT_API size_t gt_stage_num_params(const gt_stage *stage);          /* elements in each buffer */

/* The wte sub-range (element offset and count) within every buffer; returns 1 if the stage holds
 * wte (first or last), else 0 with *offset = *count = 0. */
GT_API int gt_stage_wte_range(const gt_stage *stage, size_t *offset, size_t *count);

/* Per-tensor table, in buffer order. Names are Hugging Face GPT-2 names; the wte copy held by a
 * last stage that is not first is named "lm_head.weight" (HF's tied head), so the shards of all
 * stages merge into one HF state dict without a clash. */
typedef struct {
    const char *name;  /* e.g. "transformer.h.3.attn.c_attn.weight" */
    int ndim;          /* 1 or 2 */
    int64_t shape[2];  /* shape[1] unused when ndim == 1 */
    size_t offset;     /* element offset into each buffer */
    size_t numel;      /* elements */
    int decay;         /* 1: AdamW weight decay applies (2-D: matrices and embeddings) */
} gt_tensor_info;

GT_API int gt_stage_num_tensors(const gt_stage *stage);
GT_API const gt_tensor_info *gt_stage_tensor(const gt_stage *stage, int i); /* NULL if out of range */

/* ------------------------------------------------------------------------------------------ */
/* compute                                                                                     */

/* Forward of one micro-batch into slot `slot`.
 *   tokens  first stage: int32 (B,T) token ids in [0, V); else ignored (may be NULL)
 *   x_in    non-first: fp32 (B,T,C) hidden states from the previous stage (copied); else NULL
 *   x_out   non-last: fp32 (B,T,C) output hidden states; else NULL
 *   targets last stage: int32 (B,T) target ids in [0, V); else NULL
 *   loss_out last stage: mean cross-entropy of the micro-batch; else NULL */
GT_API int gt_stage_forward(gt_stage *stage, int slot, const int32_t *tokens, const float *x_in,
                     float *x_out, const int32_t *targets, float *loss_out);

/* Full backward of slot `slot`, ACCUMULATING parameter gradients into GT_BUF_GRADS and freeing
 * the slot. = gt_stage_backward_input followed by gt_stage_backward_weight.
 *   dx_out     non-last: fp32 (B,T,C) gradient w.r.t. x_out; else NULL
 *   dx_in      non-first: fp32 (B,T,C) output, gradient w.r.t. x_in; else NULL
 *   loss_scale last stage: d(objective)/d(loss of this micro-batch), e.g. 1/num_microbatches */
GT_API int gt_stage_backward(gt_stage *stage, int slot, const float *dx_out, float *dx_in,
                      float loss_scale);

/* Zero-bubble split: input gradients (dx_in); keeps the slot (and the activation gradients of
 * this micro-batch) until gt_stage_backward_weight(slot) computes the weight gradients. A
 * backend may accumulate a few cheap weight gradients already here, where they fall out of the
 * input pass (the CUDA backend: the LayerNorms' weights and biases); the sum over both halves
 * is always that of gt_stage_backward. */
GT_API int gt_stage_backward_input(gt_stage *stage, int slot, const float *dx_out, float *dx_in,
                            float loss_scale);
GT_API int gt_stage_backward_weight(gt_stage *stage, int slot);

/* ------------------------------------------------------------------------------------------ */
/* optimizer                                                                                   */

GT_API int gt_stage_zero_grad(gt_stage *stage);

/* The gradients restart from zero for a new accumulation (API version 6): the buffer reads as
 * after gt_stage_zero_grad, but a backend may get there without a pass over all of it. The CUDA
 * backend zeroes only the tensors kernels add to and has the next gt_stage_backward /
 * gt_stage_backward_weight write the weight matrices' gradients outright (products with
 * beta 0; GANTRY_GRAD_OVERWRITE=0: a plain gt_stage_zero_grad); reading or writing the
 * gradients before that action zeroes those matrices first. The CPU backend zeroes all. */
GT_API int gt_stage_start_accumulation(gt_stage *stage);

/* Sum of squares of the stage's gradients (accumulated in double, fixed order). With
 * include_wte == 0 the wte range is left out (so that the tied weight counts once in the global
 * norm: pass 0 on the last stage when it is not also the first). */
GT_API int gt_stage_grad_sq_sum(const gt_stage *stage, int include_wte, double *out);

/* One AdamW step over all tensors, matching torch.optim.AdamW (amsgrad=False, maximize=False):
 *   g = grad * grad_scale                (grad_scale: clip coefficient, 1 for none)
 *   p -= lr * weight_decay * p           (only tensors with decay = 1; 0 for biases/LayerNorm)
 *   m = lerp(m, g, 1 - beta1);  v = beta2 * v + (1 - beta2) * g * g
 *   p -= (lr / (1 - beta1^t)) * m / (sqrt(v) / sqrt(1 - beta2^t) + eps)
 * step_t is the 1-based step count. Gradients are not modified. */
GT_API int gt_stage_adamw_step(gt_stage *stage, float lr, float beta1, float beta2, float eps,
                        float weight_decay, int step_t, float grad_scale);

/* Clip coefficient as torch.nn.utils.clip_grad_norm_: min(1, max_norm / (total_norm + 1e-6)). */
GT_API float gt_clip_coef(double total_norm, double max_norm);

/* Learning rate at 0-based step `step`:
 *   linear warmup: step < warmup_steps -> max_lr * (step + 1) / warmup_steps
 *   GT_LR_CONSTANT: max_lr afterwards
 *   GT_LR_COSINE:   min_lr + 0.5 * (1 + cos(pi * r)) * (max_lr - min_lr),
 *                   r = (step - warmup_steps) / (total_steps - warmup_steps), clamped to [0, 1] */
typedef enum { GT_LR_CONSTANT = 0, GT_LR_COSINE = 1 } gt_lr_kind;
GT_API double gt_lr_at(gt_lr_kind kind, int step, double max_lr, double min_lr, int warmup_steps,
                int total_steps);

/* ------------------------------------------------------------------------------------------ */
/* weights I/O (safetensors, Hugging Face GPT-2 names)                                         */

/* Loads every tensor the stage owns from a safetensors file into buffer `which`. Accepts names
 * with or without the "transformer." prefix; the last (non-first) stage's wte copy comes from
 * "lm_head.weight" if present, else "transformer.wte.weight". Tensors of other stages are
 * ignored; HF's attention-mask buffers (".attn.bias", ".attn.masked_bias") are ignored; any other
 * unknown name, a missing tensor, a dtype other than F32, a wrong shape or a truncated file is
 * GT_EINPUT naming the file and tensor. Nothing is modified on failure. */
GT_API int gt_stage_load(gt_stage *stage, const char *path, gt_buffer which);

/* Writes buffer `which` with the stage's tensor names (see gt_stage_tensor) as safetensors
 * (metadata {"format": "pt"}); written to path + ".tmp", fsynced, then renamed. */
GT_API int gt_stage_save(const gt_stage *stage, const char *path, gt_buffer which);

/* ------------------------------------------------------------------------------------------ */
/* token shards (llm.c layout: 256 int32 header {20240520, 1, ntok, 0...}, then ntok uint16)  */

#define GT_SHARD_MAGIC 20240520
#define GT_SHARD_VERSION 1
#define GT_SHARD_HEADER_INTS 256

/* Reads a whole shard; *tokens is malloc'ed (free with gt_free). A bad magic/version or a file
 * shorter than its header says -> GT_EINPUT naming the file. */
GT_API int gt_shard_read(const char *path, uint16_t **tokens, size_t *ntok);
GT_API int gt_shard_write(const char *path, const uint16_t *tokens, size_t ntok);
GT_API void gt_free(void *ptr);


/* ------------------------------------------------------------------------------------------ */
/* backends (API version 2)                                                                    */
/*
 * One library is built per backend (CMake GANTRY_BACKEND=cpu|cuda); the functions above keep
 * their meaning, with these differences on the CUDA backend:
 *   - gt_stage_buffer returns DEVICE pointers (fp32 master parameters, fp32 gradients and fp32
 *     AdamW moments, same layout as above). Read/write them with gt_stage_read_buffer /
 *     gt_stage_write_buffer, or from device code; after writing parameters through the raw
 *     pointer call gt_stage_params_updated (compute uses a bf16 copy of the parameters).
 *   - x_in, x_out, dx_out, dx_in are DEVICE pointers to bf16 (B,T,C) activations (see
 *     gt_stage_activation_dtype / gt_stage_activation_bytes), passed through the float* type.
 *   - tokens and targets stay HOST int32 arrays (validated on the host, copied asynchronously);
 *     loss_out is a host float, so a last stage's forward waits for its own loss.
 *   - work is enqueued on the stage's stream (gt_stage_set_stream; default: the legacy default
 *     stream); functions return once the work is enqueued, except where a host result is
 *     produced (loss, gradient sum of squares, read_buffer, save).
 *   - compute is bf16 with fp32 accumulation, so results match the fp32 CPU backend to bf16
 *     tolerances; it is bit-reproducible run to run on the same GPU (no atomics).
 * On the CPU backend activations are host fp32, streams are ignored and the copies are memcpy.
 */
typedef enum { GT_DTYPE_F32 = 0, GT_DTYPE_BF16 = 1 } gt_dtype;

GT_API const char *gt_backend_name(void);                          /* "cpu" or "cuda" */
/* One line describing the stage's kernels, e.g. "cuda attention=cudnn gelu=epilogue". */
GT_API const char *gt_stage_backend_info(const gt_stage *stage);
GT_API int gt_stage_activation_dtype(const gt_stage *stage);       /* gt_dtype */
GT_API size_t gt_stage_activation_bytes(const gt_stage *stage);    /* one (B,T,C) tensor */
/* Allocates / frees an activation-sized buffer in the backend's memory (zeroed). */
GT_API int gt_stage_alloc_activation(const gt_stage *stage, void **out);
GT_API void gt_stage_free_activation(const gt_stage *stage, void *ptr);
/* Compute stream (a cudaStream_t on the CUDA backend; ignored on the CPU). */
GT_API int gt_stage_set_stream(gt_stage *stage, void *stream);
GT_API int gt_stage_synchronize(gt_stage *stage);
/* Copies count elements at element offset of buffer `which` to / from host memory. */
GT_API int gt_stage_read_buffer(gt_stage *stage, gt_buffer which, size_t offset, size_t count,
                                float *host_dst);
GT_API int gt_stage_write_buffer(gt_stage *stage, gt_buffer which, size_t offset, size_t count,
                                 const float *host_src);
GT_API int gt_stage_params_updated(gt_stage *stage);
/* Device memory in use and total on the current device (cudaMemGetInfo: every process's use,
 * context included); 0 and 0 on the CPU backend. Added in API version 3. */
GT_API int gt_backend_memory(size_t *used_bytes, size_t *total_bytes);

/* ------------------------------------------------------------------------------------------ */
/* gradients-ready hook (API version 4)                                                        */
/*
 * The pipeline executor starts the data-parallel all-reduce of gradients that are final while
 * the backward still runs. It arms the hook for the one action that is a stage's LAST
 * gradient-producing action of the step (its last gt_stage_backward or
 * gt_stage_backward_weight); while armed, that call reports each parameter range of the flat
 * gradient buffer, in backward order, as soon as the range's gradients are final:
 *   last stage:  wte (the head's gradient; a stage that is also first reports wte with the
 *                embeddings instead), then ln_f
 *   every layer, nl-1 down to 0: its 12 tensors (one contiguous range)
 *   first stage: wte and wpe (one contiguous range, after the encoder backward)
 * Together the ranges cover the buffer exactly once. On the CUDA backend a range is reported
 * when its weight-gradient kernels are ENQUEUED on the stage's stream (the hook orders its own
 * work after them, e.g. with an event), and an armed action always runs eagerly: a CUDA graph
 * replays launches without the host, so it could not call the hook. A nonzero return of the
 * hook fails the action with that status. Actions other than backward and backward_weight
 * ignore the hook. fn == NULL disarms it. */
typedef int (*gt_grad_ready_fn)(void *ctx, size_t offset, size_t count);
GT_API int gt_stage_set_grad_ready(gt_stage *stage, gt_grad_ready_fn fn, void *ctx);

/* ------------------------------------------------------------------------------------------ */
/* AdamW on part of the buffer, overlapped (API version 5)                                     */
/*
 * gt_stage_adamw_step restricted to the parameters [offset, offset + count): the same
 * per-element math, each element with its own tensor's decay flag, so updating a buffer range
 * by range gives the same bits as one gt_stage_adamw_step. CPU backend: runs at once. CUDA
 * backend: enqueued on the stage's optimizer stream after the work enqueued on the stage's
 * stream so far, so it overlaps what that stream runs next; gt_stage_join_optimizer orders the
 * stage's stream after every range enqueued so far (call it before the stage's next step). The
 * executor updates each range from the gradients-ready hook when clipping is off (no global
 * norm to wait for). */
GT_API int gt_stage_adamw_range(gt_stage *stage, size_t offset, size_t count, float lr,
                                float beta1, float beta2, float eps, float weight_decay,
                                int step_t, float grad_scale);
GT_API int gt_stage_join_optimizer(gt_stage *stage);

/* ------------------------------------------------------------------------------------------ */
/* the gradient norm from the AdamW ranges (API version 6)                                     */
/*
 * Between gt_stage_norm_capture_begin (which also restarts a capture) and _end, every
 * gt_stage_adamw_range also sums the squares of the raw gradients it reads (before grad_scale),
 * so the norm costs no pass of its own over the gradients (gt_stage_adamw_step is not
 * captured). _end returns that sum in double (waiting for the ranges on the CUDA backend): the
 * ranges' elements counted as often as they were updated, the same bits for the same ranges
 * every run; it is a different order of the same sum than gt_stage_grad_sq_sum's, so the two
 * may differ in the last bits. Only for updates that need no norm first (no clipping). */
GT_API int gt_stage_norm_capture_begin(gt_stage *stage);
GT_API int gt_stage_norm_capture_end(gt_stage *stage, double *sq);

/* ------------------------------------------------------------------------------------------ */
/* page-locked host memory for buffer copies (API version 7)                                   */
/*
 * gt_host_pin page-locks [ptr, ptr + bytes) of memory the caller allocated, so that
 * gt_stage_read_buffer / gt_stage_write_buffer into it run as direct DMA (a checkpoint's
 * copy of the device buffers: ~2 GB/s pageable, tens of GB/s pinned). CUDA backend:
 * cudaHostRegister; GT_EIO when the driver refuses (e.g. a locked-memory limit), and the memory
 * stays usable, only unpinned. CPU backend: nothing to do, GT_OK. gt_host_unpin undoes a
 * successful gt_host_pin; call it before the memory is freed. */
GT_API int gt_host_pin(void *ptr, size_t bytes);
GT_API int gt_host_unpin(void *ptr);

/* ------------------------------------------------------------------------------------------ */
/* runtime switches (API version 8)                                                            */
/*
 * The library's GANTRY_* environment switches (docs/reference/environment.md) are read and
 * checked when a stage, pipeline or communicator is created. gt_runtime_config_describe reads
 * them as those would, now, and writes one "NAME=value\n" line per switch into buf (NUL
 * terminated; the value a default or the one set), in name order: what a run records in its
 * start event. GT_EINPUT naming the variable, its value and what is allowed when one is bad;
 * GT_EINPUT when buf is too small (4096 bytes suffice). */
GT_API int gt_runtime_config_describe(char *buf, size_t cap);

#ifdef __cplusplus
}
#endif

#endif /* GANTRY_STAGE_H */
