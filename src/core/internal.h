/* Library-internal declarations shared by core, ops and backends (only they
 * have src/core on their include path).
 * defines: ut_arena, struct ut_ctx, op ids (UT_OP_*), op construction helpers
 *          (ut_op_new, ut_op_run, ut_view_new, ut_tensor_alias), grad helpers. */
#ifndef UTRAIN_INTERNAL_H
#define UTRAIN_INTERNAL_H

#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "utrain/base.h"
#include "utrain/ops.h"
#include "utrain/tensor.h"
#include "../backend/backend.h"

/* Host views of a tensor's data, for kernels of backends whose memory is
 * host memory (the CPU's). */
#ifndef UT_HOST_VIEWS_PUBLIC
static inline float *ut_f32(const ut_tensor *t) { return (float *)t->data; }
static inline int32_t *ut_i32(const ut_tensor *t) { return (int32_t *)t->data; }
#endif

/* ---- op ids, generated from ops.def ---- */
enum {
    UT_OP_NONE = 0,
#define UT_OP(E, stem, props) UT_OP_##E,
#include "ops.def"
#undef UT_OP
    UT_OP_COUNT
};

/* Op properties: the third column of ops.def, read by core (autocast,
 * autograd) and never by a backend. */
enum {
    UT_OPP_PRODUCT = 1 << 0,        /* autocast runs it in bf16/fp16 */
    UT_OPP_AUTOCAST_OUT = 1 << 1,   /* float32 inside, output stored in the autocast dtype */
    UT_OPP_KEEPS_DTYPE = 1 << 2,    /* elementwise, one input: keeps a 16-bit input's dtype */
    UT_OPP_NO_DATA = 1 << 3,        /* its forward kernel reads no tensor data */
    UT_OPP_BWD_NO_OUT = 1 << 4,     /* its backward never reads its own output */
    UT_OPP_OWNS_SRC0_GRAD = 1 << 5, /* below */
    UT_OPP_RANDOM = 1 << 6,         /* its forward draws random numbers (k->rng) */
    UT_OPP_LOSS = 1 << 7,           /* with PRODUCT: its output, a loss, and that output's gradient stay float32 */
};
extern const unsigned ut_op_props[UT_OP_COUNT];
static inline bool ut_op_is(int op, unsigned prop) { return (ut_op_props[op] & prop) != 0; }

/* Gradient ownership. Before an op's backward runs, the autograd driver gives
 * every source that requires a gradient a zeroed buffer (ut_grad) to add into,
 * except src[0] of the ops with UT_OPP_OWNS_SRC0_GRAD: for them src[0]->grad may still be
 * NULL on entry, and the backward must then set it itself, to a contiguous
 * buffer of src[0]'s shape from the context's current arena holding the whole
 * gradient (typically a buffer it saved in forward and no longer needs, which
 * saves an allocation and a memset), or call ut_grad. When src[0]->grad exists
 * (a parameter, or a tensor used again later on the tape) it adds into it like
 * any backward. */

/* The kernels of the ops core implements for every device (UT_OP_ANY). */
#define UT_OP(E, stem, props)
#define UT_OP_ANY(E, stem, props)                \
    void ut_##stem##_fwd(ut_tensor *t, const ut_kctx *k);   \
    void ut_##stem##_bwd(ut_tensor *t, const ut_kctx *k);
#include "ops.def"
#undef UT_OP_ANY
#undef UT_OP

/* The op table of the device dev's backend (asserts that it has one: a
 * context is only made for a device whose backend exists). */
const ut_op_vtable *ut_op_table(ut_device dev);

/* ---- arena: bump allocator that grows with extra chunks, then settles ---- */
typedef struct {
    char *base;
    size_t cap, used;
    const ut_backend *be;  /* device arenas: whose alloc/free its chunks come from (NULL: host) */
    void **extra;         /* overflow chunks of the current step */
    int nextra, capextra;
    size_t extra_bytes;
} ut_arena;

void ut_arena_init(ut_arena *a, size_t cap);
/* An arena of device memory: its chunks come from be->alloc (be->free). */
void ut_arena_init_device(ut_arena *a, size_t cap, const ut_backend *be);
void ut_arena_free(ut_arena *a);
void *ut_arena_alloc(ut_arena *a, size_t bytes);
/* Frees everything; if the step overflowed, the next base holds it all. */
void ut_arena_reset(ut_arena *a);
static inline size_t ut_arena_in_use(const ut_arena *a) { return a->used + a->extra_bytes; }

/* ---- context ---- */
#define UT_AUTOCAST_SPILLS (2 * UT_MAX_SRC + 8) /* most scratch takes of one op beyond the buffer */
#define UT_FLOPS_SHADOWS 8
#define UT_FLOPS_SHADOW_MAX 1025 /* offsets of up to 1024 packed sequences */
struct ut_ctx {
    ut_arena main;          /* activations, grads of activations */
    ut_arena scratch;       /* checkpointed blocks: forward and recompute */
    ut_arena *arena;        /* the one ops allocate from now */
    /* Device memory (tensor data, gradients, kernels' saved buffers and
     * scratch) on a device whose memory is not host memory: dmain / dscratch
     * mirror main / scratch, and darena is the one in use. On the CPU darena
     * is arena itself (one arena holds headers and data). */
    ut_arena dmain, dscratch;
    ut_arena *darena;
    const ut_backend *be;   /* the device's backend */
    ut_kctx kctx;           /* what kernels get (backend.h): this context's services; ut_ctx_launch copies it */
    /* Guards the arenas on a device whose kernels may allocate from a worker
     * thread of their backend while the host goes on (sim): every arena
     * allocation, reset and the peak count take it there (locked). */
    pthread_mutex_t mu;
    bool locked;
    size_t peak;
    ut_tensor **tape;
    int tape_len, tape_cap;
    bool grad_enabled, training, in_checkpoint, collecting;
    int fresh_grads;  /* gradients written whole where kernels can (autograd.c): 0 off, 1 on, 2 NaN-filled */
    bool fuse_linear_gelu; /* ut_linear_gelu one op where the device's kernels take it (UT_LINEAR_GELU) */
    bool fuse_linear_ce;   /* ut_linear_cross_entropy one op (UT_LINEAR_CE) */
    ut_device device;
    ut_philox rng;    /* dropout's generator: key, stream, offset */
    ut_grad_ready_fn grad_hook;
    void *grad_hook_user;
    ut_param_use_fn param_hook;
    void *param_hook_user;
    int *first_use;         /* per parameter index: tape position of first use */
    int first_use_cap;
    int *collected;         /* params seen while running a checkpointed fn */
    int ncollected, collected_cap;
    char err[512];
    bool has_err;
    ut_dtype autocast;      /* F32 (off), BF16 or F16: see src/core/autocast.c */
    float label_smoothing;  /* the losses' default (ut_ctx_set_label_smoothing) */
    float neftune_alpha;    /* NEFTune's noise on token embeddings (ut_ctx_set_neftune) */
    void *ac_pool;          /* float32 copies of the op running now: sources, output, gradients, a kernel's own */
    size_t ac_cap, ac_used, ac_need;
    void *ac_spill[UT_AUTOCAST_SPILLS]; /* what did not fit, given back when the op ends */
    int ac_nspill;
    void *wide_buf[UT_MAX_SRC];     /* float32 widenings of 16-bit rounded copies, per source */
    size_t wide_cap[UT_MAX_SRC];
    struct ut_round_entry *rc; /* parameters rounded by a forward, for its backward */
    int rc_len, rc_cap;
    /* the parameters' current 16-bit copies (ut_ctx_set_param_copies): pc[i]
     * is pc_flat[i] rounded to pc_dt, i < pc_n; pc NULL: none */
    const float *pc_flat;
    int64_t pc_n;
    const void *pc;
    ut_dtype pc_dt;
    /* model FLOPs of the products run so far (src/core/flops.c); recomputing:
     * a checkpointed block's forward is being rerun (not counted again) */
    double flops;
    bool recomputing;
    struct {
        const void *data;
        int64_t n;
        int32_t v[UT_FLOPS_SHADOW_MAX];
    } shadow[UT_FLOPS_SHADOWS]; /* small int32 uploads' values (ut_flops_note_upload) */
    int nshadow, shadow_next;
};

/* The kernel context of one launch of op on ctx (backend.h, ut_kctx): the
 * arena in use now, and for an op marked UT_OPP_RANDOM a window of
 * UT_RNG_LAUNCH_DRAWS draws of its own, after which the context's generator
 * moves on (so a kernel run later still draws what it would have drawn now,
 * and a checkpointed block's recompute, which restores the generator, draws
 * the same masks). */
#define UT_RNG_LAUNCH_DRAWS ((uint64_t)1 << 40)
ut_kctx ut_ctx_launch(ut_ctx *ctx, int op);
/* Device memory of ctx's device, from its device arena in use (ut_ctx_alloc's
 * arena on a device whose memory is host memory): tensor data, gradients,
 * kernels' saved buffers and scratch. Valid until the context's reset. */
void *ut_ctx_dalloc(ut_ctx *ctx, size_t bytes);
/* Switch the arenas ops allocate from: the main ones, or the checkpoint
 * scratch ones (headers and device data together). */
void ut_ctx_use_scratch(ut_ctx *ctx, bool scratch);
/* Data errors the device's kernels found since the last check, into ctx's
 * error (wait: after the queued work; else what has come in so far:
 * backend.h, data_error); -1 when one was found. */
int ut_ctx_device_errors(ut_ctx *ctx, bool wait);
/* Per-op time, for finding where a step's time goes: with UT_PROFILE_OPS=1
 * in the environment every op's forward and backward kernel is timed (the
 * device waited for before and after, so a GPU's queue is not hidden; the
 * host's launch time counts too); with UT_PROFILE_OPS=gpu, on a device with
 * a clock (backend.h, timer_new), by timing events around each op's work on
 * the compute stream, nothing waited for: the device's own time per op. A
 * table of time per op and direction goes to stderr when the process exits,
 * with each one's nominal memory rate (its inputs', output's and gradients'
 * bytes over its time). ut_prof_begin returns the mark ut_prof_end takes for
 * op tensor t (mark.t < 0: off). */
typedef struct {
    double t;
    void *ev;
} ut_prof_mark;
ut_prof_mark ut_prof_begin(const ut_ctx *ctx);
void ut_prof_end(const ut_ctx *ctx, const ut_tensor *t, int backward, ut_prof_mark m);
/* ---- model FLOPs (src/core/flops.c) ---- */
/* The model FLOPs of op tensor t's forward or backward (0 for ops that are
 * not products). */
double ut_op_flops(const ut_tensor *t, bool backward);
/* Adds t's to ctx's count (a recompute's forward excepted). */
void ut_flops_count(ut_ctx *ctx, const ut_tensor *t, bool backward);
/* Keeps a copy of a small int32 upload's values for counting packed
 * sequences' pairs; the context's reset forgets them. */
void ut_flops_note_upload(ut_ctx *ctx, const ut_tensor *t, const void *host);
void ut_flops_forget_uploads(ut_ctx *ctx);
/* Frees everything in the checkpoint scratch arenas. */
void ut_ctx_reset_scratch(ut_ctx *ctx);

/* ---- autocast (src/core/autocast.c) ---- */
/* The storage dtype of a new output of op with sources src, that its
 * constructor asked to be dt: autocast ops give ctx's autocast dtype,
 * one-input elementwise ops a 16-bit input's dtype, others dt. */
ut_dtype ut_autocast_dtype(const ut_ctx *ctx, int op, ut_dtype dt, int nsrc,
                           ut_tensor *const *src);
/* Records ctx's autocast dtype in t when t's op is one autocast runs in low precision. */
void ut_autocast_mark(ut_ctx *ctx, ut_tensor *t);
/* Whether t's kernels must run through ut_lowp_forward / ut_lowp_backward:
 * t is an autocast op, or t or one of its sources is stored in 16 bits. */
bool ut_lowp_needed(const ut_tensor *t, bool backward);
/* Run an op's float32 kernel on float32 copies of its 16-bit sources (float32
 * sources rounded to t->autocast, and backward's incoming gradient too, for
 * an autocast op); a 16-bit output is converted into t's storage. */
void ut_lowp_forward(ut_tensor *t, ut_op_fn fwd, const ut_kctx *k);
void ut_lowp_backward(ut_tensor *t, ut_op_fn bwd, const ut_kctx *k);
void ut_autocast_free(ut_ctx *ctx);
/* Forgets the parameters' rounded copies (the context's reset): buffers stay. */
void ut_autocast_forget(ut_ctx *ctx);
/* Float32 scratch of at least bytes for the kernel of the op that
 * ut_lowp_forward / ut_lowp_backward runs now, valid until that op ends:
 * where a kernel computes what it then stores in 16 bits. */
float *ut_autocast_scratch(ut_ctx *ctx, size_t bytes);
/* A kernel that does autocast itself (UT_KCAP_NATIVE_16, backend.h) and took
 * ut_autocast_scratch gives it all back when it ends. */
void ut_autocast_release(ut_ctx *ctx);
/* The rounded 16-bit copy (dt, n elements from s->data) of a float32
 * parameter (or a view of one) s that an autocast op reads: a forward rounds
 * it afresh and keeps it, the op's backward (and a checkpoint's recompute,
 * backward true) gets the kept copy back. NULL when no backward will follow
 * (gradients off): nothing is kept. A kernel that multiplies 16-bit operands
 * itself reads this copy directly; float32 kernels get it widened (exact). */
const void *ut_autocast_round16(ut_ctx *ctx, const ut_tensor *s, int64_t n, ut_dtype dt, bool backward);

/* The parameter behind t: t itself, or the parameter a chain of views
 * starts from; -1 if none. */
static inline int ut_param_behind(const ut_tensor *t) {
    while (t && t->param_index < 0 && (t->op == UT_OP_RESHAPE || t->op == UT_OP_PERMUTE ||
                                       t->op == UT_OP_SLICE))
        t = t->src[0];
    return t ? t->param_index : -1;
}
/* The parameter hook for each input of t that is (a view of) a parameter. */
static inline void ut_param_use(ut_ctx *ctx, ut_tensor *const *src, int n) {
    if (!ctx->param_hook) return;
    for (int i = 0; i < n; i++) {
        int pi = src[i] ? ut_param_behind(src[i]) : -1;
        if (pi >= 0) ctx->param_hook(ctx->param_hook_user, pi);
    }
}

/* ---- op construction ---- */
/* ut_op_check and ut_op_error are public (include/utrain/ops.h). */
/* A loss's targets against its input x (..., V) (src/ops/softmax.c): the
 * same leading dims and contiguous, else the op's error naming src[0..n). */
bool ut_loss_targets_fit(ut_ctx *ctx, const char *name, int n, ut_tensor *const *src, const ut_tensor *x,
                         const ut_tensor *targets);
/* New contiguous output of op with sources src (requires_grad derived). */
ut_tensor *ut_op_new(ut_ctx *ctx, int op, ut_dtype dt, int ndim, const int64_t *ne, int nsrc,
                     ut_tensor *const *src);
/* Runs the forward kernel and records t on the tape if it needs a gradient. */
ut_tensor *ut_op_run(ut_tensor *t);
/* A view of src sharing its data at element offset off, with shape/strides. */
ut_tensor *ut_view_new(ut_ctx *ctx, int op, ut_tensor *src, int ndim, const int64_t *ne,
                       const int64_t *nb, int64_t off);

/* ---- autograd helpers ---- */
/* Grad buffer of t, allocated zeroed from the current arena if missing: float32,
 * or for a BF16/F16 tensor 16-bit storage in its dtype (read through ut_lowp_backward). */
float *ut_grad(ut_tensor *t);
/* t's gradient made (it has none) without zeroing, for a backward that
 * writes it whole (backend.h, UT_KCAP_FRESH_GRAD); poison: filled with NaNs. */
void ut_grad_unzeroed(ut_tensor *t, bool poison);
void ut_tape_push(ut_ctx *ctx, ut_tensor *t);
void ut_backward_range(ut_ctx *ctx, int lo, int hi, bool hooks);
void ut_note_param(ut_ctx *ctx, const ut_tensor *t);

/* ---- shapes ---- */
/* Contiguous strides of shape ne into st. */
void ut_contiguous_strides(int64_t *st, int ndim, const int64_t *ne);
/* a's data (contiguous) under the shape ne, as a leaf: no op, no gradient
 * (index tensors are relabelled this way). */
ut_tensor *ut_tensor_alias(ut_ctx *ctx, ut_tensor *a, int ndim, const int64_t *ne);

#endif
