/* utrain tensors, the per-step context, autograd.
 * defines: ut_dtype, ut_device, ut_tensor, ut_ctx, ut_ctx_* (arena, tape, errors,
 *          no-grad mode), ut_tensor_* constructors, ut_tensor_set/get,
 *          ut_tensor_bind, ut_backward, ut_checkpoint, ut_collective. */
#ifndef UTRAIN_TENSOR_H
#define UTRAIN_TENSOR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

#define UT_MAX_DIMS 4
#define UT_MAX_SRC 4
#define UT_MAX_IPARAMS 8
#define UT_MAX_FPARAMS 4
#define UT_MAX_AUX 4

/* Storage types. Compute is float32 on the CPU; bf16/fp16 are storage types that
 * mixed precision uses (ut_tensor_to converts; ut_ctx_set_autocast rounds the
 * matmuls' operands to them). I32 holds token ids and labels. */
typedef enum { UT_F32 = 0, UT_BF16, UT_F16, UT_I32, UT_DTYPE_COUNT } ut_dtype;
/* The devices the API names; src/backend/backends.def says which this
 * build has (sim: the simulated device, the CPU's kernels on memory the
 * host cannot read, for testing the device seam). */
typedef enum { UT_CPU = 0, UT_CUDA, UT_SIM, UT_DEVICE_COUNT } ut_device;

const char *ut_dtype_name(ut_dtype dt);
size_t ut_dtype_size(ut_dtype dt);
/* bf16 or fp16: the 16-bit floating-point storage types */
static inline bool ut_dtype_is16(ut_dtype dt) { return dt == UT_BF16 || dt == UT_F16; }
const char *ut_device_name(ut_device dev);

typedef struct ut_ctx ut_ctx;
typedef struct ut_tensor ut_tensor;

/* A tensor is a header (shape, strides, op that made it) over storage owned by
 * someone else: the context's arena for activations, a model's flat buffer for
 * parameters. Shapes are outermost first, as in PyTorch: ne[ndim-1] is the
 * innermost (contiguous) dimension. nb[] are strides in elements; views
 * (ut_transpose, ut_permute, ut_slice) share data and differ in nb[].
 * grad, when present, is always contiguous in the tensor's logical shape. */
struct ut_tensor {
    ut_dtype dtype;
    ut_device device;
    int ndim;
    int64_t ne[UT_MAX_DIMS];
    int64_t nb[UT_MAX_DIMS];
    void *data;
    float *grad;
    int op;                           /* UT_OP_NONE for leaves */
    ut_dtype autocast;                /* BF16/F16: the op ran its products in it (ut_ctx_set_autocast) */
    ut_tensor *src[UT_MAX_SRC];
    int64_t ip[UT_MAX_IPARAMS];       /* integer op parameters */
    float fp[UT_MAX_FPARAMS];         /* float op parameters */
    void *aux[UT_MAX_AUX];            /* saved buffers for backward (arena) */
    bool requires_grad;
    int param_index;                  /* index in its model's parameter list, or -1 */
    ut_ctx *ctx;                      /* context that made it (NULL for parameters) */
    const char *name;
};

/* ---- tensor queries ---- */
int64_t ut_nelem(const ut_tensor *t);
bool ut_is_contiguous(const ut_tensor *t);
/* "(4, 16, 64)" into buf; returns buf. */
char *ut_shape_str(const ut_tensor *t, char *buf, size_t n);
/* Sets contiguous strides for ne[0..ndim). */
void ut_set_contiguous_strides(ut_tensor *t);

/* ---- context ---- */
typedef struct {
    size_t arena_bytes;   /* first arena chunk; grows on demand, then settles (0: 64 MiB) */
    uint64_t seed;        /* dropout and other random ops */
    ut_device device;
} ut_ctx_opts;

/* Called by backward when a parameter's gradient is complete for this
 * backward pass (every op that used it has added its part). */
typedef void (*ut_grad_ready_fn)(void *user, int param_index);

ut_ctx *ut_ctx_new(const ut_ctx_opts *opts);
void ut_ctx_free(ut_ctx *ctx);
/* Drops the tape and every activation: call after the optimizer step. */
void ut_ctx_reset(ut_ctx *ctx);
/* Autograd recording on/off (off = no-grad mode for evaluation). Returns the old value. */
bool ut_ctx_set_grad_enabled(ut_ctx *ctx, bool on);
bool ut_ctx_grad_enabled(const ut_ctx *ctx);
/* Training mode (dropout active) on/off. Returns the old value. */
bool ut_ctx_set_training(ut_ctx *ctx, bool on);
bool ut_ctx_training(const ut_ctx *ctx);
ut_device ut_ctx_device(const ut_ctx *ctx);
void ut_ctx_seed(ut_ctx *ctx, uint64_t seed);
/* Autocast, as PyTorch's CPU autocast: with dt BF16 or F16, linear, matmul,
 * conv2d and attention take their inputs and weights rounded to dt, add up
 * in float32 and round their output to dt; softmax, the losses, layer norm,
 * reductions and elementwise ops stay float32, and parameters' gradients
 * accumulate in float32. F32 turns it off (the default). Applies to ops made
 * from now on (their backward follows what their forward did). Returns the
 * old setting. */
ut_dtype ut_ctx_set_autocast(ut_ctx *ctx, ut_dtype dt);
ut_dtype ut_ctx_autocast(const ut_ctx *ctx);
/* Label smoothing eps in [0, 1] for the cross_entropy and nll_loss ops made
 * from now on (ut_cross_entropy, ut_nll_loss; 0, the default, is none): how
 * the trainer applies train.label_smoothing to any model's loss, as the
 * Hugging Face Trainer's label_smoothing_factor. Returns the old setting. */
float ut_ctx_set_label_smoothing(ut_ctx *ctx, float eps);
float ut_ctx_label_smoothing(const ut_ctx *ctx);
/* NEFTune's alpha (0, the default, is none): in training mode the models
 * add uniform noise of magnitude alpha / sqrt(L d) to their token
 * embeddings (ut_neftune, nn.h), as the Hugging Face Trainer's
 * neftune_noise_alpha. Returns the old setting. */
float ut_ctx_set_neftune(ut_ctx *ctx, float alpha);
float ut_ctx_neftune(const ut_ctx *ctx);
/* What autocast's matrix products in dt run on, on device dev, for logs:
 * "oneDNN AMX", "oneDNN AVX512_BF16", "fp32 sgemm on bf16-rounded inputs (CPU
 * has no bf16 instructions)", ... (the CPU backend decides once, at first
 * use, from cpuid and whether oneDNN runs bf16 there). */
const char *ut_autocast_matmul_path(ut_device dev, ut_dtype dt);
/* What dev's attention ops run on under dt (F32, or autocast's BF16 / F16),
 * in a few words for the run log ("utrain's fused flash attention on the
 * tensor cores (mma.sync; ...)", "cuDNN's fused flash attention ..."); NULL
 * where the backend has one path and says nothing (the CPU, sim). */
const char *ut_attention_path(ut_device dev, ut_dtype dt);
/* Current 16-bit copies of the parameters for autocast: copies[i] is
 * flat[i] rounded to dt for every parameter element i in [0, n) (both memory of the context's
 * device; an optimizer writes them in its pass, ut_optim_set_copies16).
 * While set, an autocast op of dt that reads a parameter inside flat takes
 * its copy instead of rounding the parameter itself (where the copy's
 * address is 16-byte aligned; otherwise it rounds as before): the same
 * values, without a pass over the float32 parameters each forward. The
 * caller promises that nothing writes flat without writing the copies until
 * it calls this again; copies NULL stops it (before loading weights, say). */
void ut_ctx_set_param_copies(ut_ctx *ctx, const float *flat, int64_t n, const void *copies, ut_dtype dt);
/* Dropout's generator (ut_philox), keyed by the seed: ut_ctx_rng_stream
 * starts stream `stream` at offset 0 (the trainer starts one per
 * micro-batch and rank, from ut_philox_stream(epoch, batch, rank), so a mask
 * never depends on what was drawn before and a resume needs no saved
 * state); get gives the 4-word state {key, stream, offset, 0} that
 * checkpoints record. */
void ut_ctx_rng_stream(ut_ctx *ctx, uint64_t stream);
void ut_ctx_rng_get(const ut_ctx *ctx, uint64_t state[4]);
/* Moves the current stream to region k: a model that runs in pipeline
 * stages draws its embeddings' masks in region 0, block l's in region l + 1
 * and its head's after the last block, so a block's masks are the same
 * whichever stage (or the whole model) runs it. A region holds 2^40 draws. */
void ut_ctx_rng_region(ut_ctx *ctx, int64_t k);
void ut_ctx_set_grad_hook(ut_ctx *ctx, ut_grad_ready_fn fn, void *user);
/* Called before a parameter's values are read: when an op (or a view) takes
 * the parameter, or a view of it, as an input, and before backward runs an op
 * that took one. A strategy that keeps parameters elsewhere (ZeRO-3) brings
 * them in here. NULL removes it. */
typedef void (*ut_param_use_fn)(void *user, int param_index);
void ut_ctx_set_param_hook(ut_ctx *ctx, ut_param_use_fn fn, void *user);

/* Sticky error: the first failing op stores a message naming the op and the
 * shapes and returns NULL; later ops given NULL return NULL too. */
const char *ut_ctx_error(const ut_ctx *ctx);
void ut_ctx_clear_error(ut_ctx *ctx);
void ut_ctx_set_error(ut_ctx *ctx, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Bad data a device's kernels found (an index out of range: a GPU cannot
 * stop the host when its kernel finds one) as ctx's error naming the op:
 * waits for the work queued so far, then -1 if there was some, else 0 (0 at
 * once on the CPU, which reports at the op). ut_tensor_get checks so after
 * its copy; ut_backward looks only at what the device has reported by its
 * end, without waiting, so an error it has not seen yet is reported by the
 * next check, read or backward. */
int ut_ctx_device_check(ut_ctx *ctx);

/* UT_PROFILE_OPS (docs/gpu.md): forget the op times gathered so far, the
 * queued ops' included, so that the report at exit covers only what
 * follows (a benchmark's timed steps without its warm-ups, whose first
 * launches load kernels and pick algorithms). Nothing when profiling is off. */
void ut_profile_ops_reset(void);
/* A profile of one stretch of work (the trainer's train.profile_step, a
 * step's profile): ut_profile_ops_start forgets what was gathered and times
 * every op of ctx's device from here on (its timing events where it has
 * them, else the host's clock around waits); -1 (nothing done) when
 * UT_PROFILE_OPS is set, which profiles the whole run (ut_profile_ops_env
 * says so). ut_profile_ops_stop ends it: sums gets the ops' seconds and
 * model FLOPs, forward [0] and backward [1] (a recompute's forward
 * included), and f (NULL: none) the table, headed by title. */
typedef struct {
    double seconds[2], flops[2];
} ut_profile_sums;
bool ut_profile_ops_env(const ut_ctx *ctx);
int ut_profile_ops_start(const ut_ctx *ctx);
void ut_profile_ops_stop(ut_profile_sums *sums, FILE *f, const char *title);

/* The model FLOPs of the matrix products ctx has run since it was made
 * (linear, matmul, conv2d, attention; forward and backward; a checkpointed
 * block's recompute left out): the count MFU divides by the device's peak.
 * The rules are at the top of src/core/flops.c (docs/training.md). */
double ut_ctx_flops(const ut_ctx *ctx);

/* Memory accounting of the activation arena (bytes). peak is the largest
 * amount in use at once since the last ut_ctx_reset_peak. */
size_t ut_ctx_bytes_in_use(const ut_ctx *ctx);
size_t ut_ctx_peak_bytes(const ut_ctx *ctx);
void ut_ctx_reset_peak(ut_ctx *ctx);
/* Memory that autocast (a BF16/F16 context) holds outside the arena, in
 * bytes; both stay allocated until ut_ctx_free. round: parameters rounded by
 * a forward and kept for its backward, in 16 bits (2 bytes per parameter
 * element an autocast op reads), and the float32 buffers they are widened
 * into. scratch: the float32 conversion buffer, as large as the most that
 * one op has taken at once (its sources, output, their gradients, its
 * kernel's own). 0 and 0 for a float32 context. */
size_t ut_ctx_autocast_round_bytes(const ut_ctx *ctx);
size_t ut_ctx_autocast_scratch_bytes(const ut_ctx *ctx);
/* Scratch memory from the arena, 64-byte aligned, freed by ut_ctx_reset. */
void *ut_ctx_alloc(ut_ctx *ctx, size_t bytes);
int ut_ctx_tape_len(const ut_ctx *ctx);
ut_tensor *ut_ctx_tape_at(const ut_ctx *ctx, int i);  /* i-th recorded op, forward order */

/* ---- constructors (arena-backed, freed by ut_ctx_reset) ---- */
ut_tensor *ut_tensor_new(ut_ctx *ctx, ut_dtype dt, int ndim, const int64_t *ne);
ut_tensor *ut_tensor_new2(ut_ctx *ctx, ut_dtype dt, int64_t n0, int64_t n1);
ut_tensor *ut_tensor_zeros(ut_ctx *ctx, ut_dtype dt, int ndim, const int64_t *ne);
/* Copies n = prod(ne) elements from data. */
ut_tensor *ut_tensor_from(ut_ctx *ctx, ut_dtype dt, int ndim, const int64_t *ne, const void *data);
/* Wraps memory of the context's device without copying (the caller keeps it
 * alive until reset). Not for host arrays on a device context: copy those in
 * with ut_tensor_from (the sim device refuses a kernel over host memory). */
ut_tensor *ut_tensor_wrap(ut_ctx *ctx, ut_dtype dt, int ndim, const int64_t *ne, void *data);
/* ut_tensor_from without waiting: the copy into the new tensor is queued on
 * the context's stream and reads host when the stream gets there, so host
 * must stay unchanged until an event recorded after it is done
 * (ut_inputs_fence). From page-locked memory (ut_host_alloc through a
 * ut_inputs, or the loader's buffers) it overlaps with the device's work. */
ut_tensor *ut_tensor_from_async(ut_ctx *ctx, ut_dtype dt, int ndim, const int64_t *ne, const void *host);

/* ---- inputs prepared on the host ----
 * Arrays a model computes from a batch's values (token ids, masks,
 * positions, packed offsets) before its forward. The trainer has the loader
 * thread make them while the device runs the previous step (a model's
 * prepare, nn.h), then uploads each with one asynchronous copy from the
 * loader's page-locked memory; the forward sees device tensors only. */
#define UT_MAX_INPUTS 8
typedef struct {
    ut_dtype dtype;
    int ndim;
    int64_t ne[UT_MAX_DIMS];
    void *host;          /* host memory, contiguous */
} ut_host_array;
typedef struct {
    int n;               /* arrays added since the last ut_inputs_clear */
    int layout;          /* the model's tag for which arrays it made (packed rows or padded) */
    int64_t seq_len[2];  /* the batch's padded token sequences' lengths (source, decoder; 0: none),
                            what NEFTune's noise scales by whatever the layout (ut_neftune) */
    ut_host_array a[UT_MAX_INPUTS];
    /* The batch's targets (host) while prepare runs, where its caller has
     * them (the loader; .host NULL otherwise): a model may prepare from them
     * too (a masked language model gathers the rows that have a label). */
    ut_host_array targets;
    void *buf[UT_MAX_INPUTS];  /* the memory behind a[i].host, kept from batch to batch */
    size_t cap[UT_MAX_INPUTS]; /* its bytes */
    ut_device dev;       /* its memory is page-locked for this device's copies */
    void *fence;         /* event after the last upload from this memory (ut_inputs_fence), */
    ut_device fence_dev; /* of this device's backend */
} ut_inputs;
/* Host memory for one more array of in (dtype dt, shape ne), valid until in
 * is cleared or freed; aborts past UT_MAX_INPUTS arrays (a model's bug). */
void *ut_inputs_add(ut_inputs *in, ut_dtype dt, int ndim, const int64_t *ne);
/* No arrays (their memory is kept for the next batch); waits for the fence. */
void ut_inputs_clear(ut_inputs *in);
void ut_inputs_free(ut_inputs *in);
/* The arrays as tensors of ctx's device, in the order they were added, each
 * filled by one asynchronous copy (ut_tensor_from_async); then
 * ut_inputs_fence. -1 with the context's error set when the arena is out of
 * memory. */
int ut_inputs_upload(ut_ctx *ctx, ut_inputs *in, ut_tensor **t);
/* Records in's fence on ctx's stream: the copies from in's memory queued so
 * far (and from memory that lives as long, such as the batch beside it) are
 * done when it is. ut_inputs_clear waits for it before the memory is
 * written again. */
void ut_inputs_fence(ut_ctx *ctx, ut_inputs *in);
/* The host waits for the fence (no-op without one). */
void ut_inputs_wait(ut_inputs *in);
/* -1, with "model: why (input: i32 (B, 3, T))" in err: a prepare's refusal. */
int ut_input_error(char *err, size_t n, const char *model, const ut_host_array *x, const char *why);

/* Whole-tensor copies between host memory and a tensor, through its device's
 * backend (the only way code outside the library's core and backends reads or
 * writes tensor contents). bytes must equal nelem * dtype size and the tensor
 * must be contiguous; otherwise -1, with the context's error set when the
 * tensor has a context. */
int ut_tensor_set(ut_tensor *t, const void *host, size_t bytes);
int ut_tensor_get(const ut_tensor *t, void *host, size_t bytes);
/* t's contents into memory of t's device at dst (bytes as ut_tensor_get
 * checks them), queued in stream order without a host wait: values to read
 * back later together, in one copy (the trainer's per-micro-batch losses). */
int ut_tensor_copy_to(const ut_tensor *t, void *dst, size_t bytes);
/* src's contents into the contiguous dst (same dtype and device) from its
 * element first on, queued in stream order like ut_tensor_copy_to: a step's
 * rows into a cache. -1 (the context's error set) when it does not fit. */
int ut_tensor_copy_into(ut_tensor *dst, int64_t first, const ut_tensor *src);
/* A tensor of ctx over t's memory (t contiguous, on ctx's device, and kept
 * alive by its own context until ctx is reset): state that outlives a
 * step's context (a decoder's cache), used in that step's ops. NULL with
 * ctx's error set otherwise. */
ut_tensor *ut_tensor_share(ut_ctx *ctx, const ut_tensor *t);
/* t's gradient (float32, contiguous in t's shape) into host memory after a
 * backward: bytes must equal nelem * 4. A tensor that received no gradient
 * reads as zeros. -1 (with the context's error when t has one) when t is a
 * 16-bit tensor or the size differs. */
int ut_tensor_get_grad(const ut_tensor *t, float *host, size_t bytes);
/* A new tensor of dtype dt holding t's values converted (F32, BF16, F16 in
 * any pair; to a 16-bit type rounding to nearest even, NaN kept, overflow to
 * inf for F16). t must be contiguous; no gradient flows through. NULL with
 * the context's error set for other dtypes or a strided t. */
ut_tensor *ut_tensor_to(ut_ctx *ctx, const ut_tensor *t, ut_dtype dt);
/* Points a tensor no context owns (a model's parameter) at storage in its
 * device's memory: data, and grad for its gradient (NULL: none yet). */
void ut_tensor_bind(ut_tensor *t, void *data, float *grad);
/* Marks a leaf as needing a gradient (allocated from the arena on backward). */
void ut_tensor_set_requires_grad(ut_tensor *t, bool on);

/* ---- autograd ---- */
/* Reverse walk over the tape from a scalar loss (its gradient seeded with 1).
 * Parameter gradients are ADDED into their buffers, so micro-batches accumulate
 * until the model's gradients are zeroed. Returns 0, or -1 with ut_ctx_error set. */
int ut_backward(ut_ctx *ctx, ut_tensor *loss);
/* The same walk seeded from a given gradient: grad (f32, contiguous, t's
 * shape, on t's device) is added to t's gradient, then every op on the tape
 * runs backward. What a pipeline stage does with the gradient of its output
 * that the next stage sent back; ut_backward(ctx, loss) is
 * ut_backward_from(ctx, loss, ones). t must be f32 and require grad. */
int ut_backward_from(ut_ctx *ctx, ut_tensor *t, const ut_tensor *grad);

/* Activation checkpointing. fn computes one output from n inputs using ops on
 * ctx. Under ut_checkpoint it runs without keeping its inner activations; the
 * backward pass runs it again (same dropout masks) and backpropagates through
 * the recomputed tape. Parameters fn uses are reported ready as usual. */
typedef ut_tensor *(*ut_checkpoint_fn)(ut_ctx *ctx, void *user, ut_tensor **in, int n);
ut_tensor *ut_checkpoint(ut_ctx *ctx, ut_checkpoint_fn fn, void *user, ut_tensor **in, int n);

/* A collective as an op, for parallelism inside a model (tensor parallel's
 * all-reduces: ut_tp_copy, ut_tp_reduce in dist.h). fn(user, dev, buf, n,
 * err, errn) combines the n floats of device memory buf (device dev) across
 * ranks in place, or fails with 0 / -1 and a message in err. The op's output
 * is x (made contiguous) passed through fwd; in backward, x's gradient gets
 * the output's gradient passed through bwd. NULL for either: the identity.
 * A 16-bit x under autocast is combined as float32 and keeps its dtype.
 * name names the op in errors ("tp_reduce: rank 1: timeout ..."); fwd, bwd,
 * user and name must stay valid until the backward. */
typedef int (*ut_collective_fn)(void *user, ut_device dev, float *buf, int64_t n, char *err, size_t errn);
ut_tensor *ut_collective(ut_ctx *ctx, ut_tensor *x, ut_collective_fn fwd, ut_collective_fn bwd, void *user,
                         const char *name);
/* The same where the output has another shape (ndim, ne; float32): fwd(user,
 * dev, x's in_n floats, in_n, the output's out_n floats, out_n) writes the
 * output; bwd(user, dev, the output's gradient, out_n, a buffer of in_n
 * floats, in_n) writes the gradient that is added into x's (sequence
 * parallelism's all-gathers and reduce-scatters along the sequence, dist.h).
 * Both are required. */
typedef int (*ut_collective_to_fn)(void *user, ut_device dev, const float *in, int64_t in_n, float *out,
                                   int64_t out_n, char *err, size_t errn);
ut_tensor *ut_collective_to(ut_ctx *ctx, ut_tensor *x, int ndim, const int64_t *ne, ut_collective_to_fn fwd,
                            ut_collective_to_fn bwd, void *user, const char *name);

#ifdef __cplusplus
}
#endif
#endif
