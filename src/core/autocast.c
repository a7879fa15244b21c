/* Autocast and 16-bit activations.
 *
 * The policy, as PyTorch's CPU autocast: the matrix products (linear, matmul,
 * conv2d, attention) of a context with a low-precision dtype take their
 * operands rounded to it, accumulate in float32 and store their output in
 * it (a BF16/F16 tensor, 2 bytes per element in the arena). Layer norm
 * computes in float32 and stores its output in the autocast dtype too: in a
 * transformer its consumers are products, which round it anyway. Elementwise ops
 * that map one input to one output (scale, relu, gelu, tanh, sigmoid,
 * dropout) keep a 16-bit input's dtype; every other op (add, mul, softmax,
 * the losses, layer norm, reductions) gives float32. Views and contiguous
 * copies keep their source's dtype. Gradients are float32 everywhere.
 *
 * The kernels stay float32. Around an op that reads or writes a 16-bit
 * tensor, or that autocast runs, ut_lowp_forward / ut_lowp_backward point
 * each 16-bit source at a float32 copy of it (the backend's convert into a
 * scratch buffer the context keeps), each float32 source of an autocast op at
 * a copy rounded to its dtype, and a 16-bit output at a float32 buffer that
 * is converted into the tensor's storage after the kernel ran. The policy is
 * recorded per op at construction (t->autocast, t->dtype), so backward and
 * checkpoint recomputes do what the forward did.
 *
 * A parameter's rounded copy is kept in 16 bits from a forward to its
 * backward (2 bytes per element); a float32 kernel gets it widened into one
 * buffer per source slot, reused by every product (widening is exact, so the
 * kernel sees the values rounding in float32 would give). The cross-entropy
 * kernel reads 16-bit logits and writes their 16-bit gradient itself, a row at
 * a time, and the linear kernel writes its 16-bit output and reads its
 * gradient itself, a block of rows at a time, so the logits never exist in
 * float32. The float32 copies an op needs come from one scratch buffer it
 * gives back when it ends (take / give_back). */
#include "internal.h"

/* Which ops autocast runs in low precision, which keep a 16-bit input's
 * dtype, which read no data or never their own output in backward: the op
 * properties of src/core/ops.def (UT_OPP_*). */

ut_dtype ut_ctx_set_autocast(ut_ctx *ctx, ut_dtype dt) {
    ut_dtype old = ctx->autocast;
    UT_ASSERT(dt == UT_F32 || dt == UT_BF16 || dt == UT_F16);
    ctx->autocast = dt;
    return old;
}

ut_dtype ut_ctx_autocast(const ut_ctx *ctx) { return ctx->autocast; }

const char *ut_autocast_matmul_path(ut_device dev, ut_dtype dt) {
    const ut_backend *b = ut_backend_get(dev);
    return b && b->matmul_path ? b->matmul_path(dt) : "unknown";
}

const char *ut_attention_path(ut_device dev, ut_dtype dt) {
    const ut_backend *b = ut_backend_get(dev);
    return b && b->attention_path ? b->attention_path(dt) : NULL;
}

ut_dtype ut_autocast_dtype(const ut_ctx *ctx, int op, ut_dtype dt, int nsrc,
                           ut_tensor *const *src) {
    if (dt != UT_F32) return dt;
    if (ctx->autocast != UT_F32 && ut_op_is(op, UT_OPP_PRODUCT | UT_OPP_AUTOCAST_OUT) && !ut_op_is(op, UT_OPP_LOSS))
        return ctx->autocast;
    if (ut_op_is(op, UT_OPP_KEEPS_DTYPE) && nsrc > 0 && src[0] && ut_dtype_is16(src[0]->dtype)) return src[0]->dtype;
    return UT_F32;
}

void ut_autocast_mark(ut_ctx *ctx, ut_tensor *t) {
    if (ctx->autocast != UT_F32 && ut_op_is(t->op, UT_OPP_PRODUCT)) t->autocast = ctx->autocast;
}

/* What a device's kernel does with 16-bit data itself: the caps of its
 * backend's op table (backend.h, UT_KCAP_*; 0: nothing, the op goes through
 * the float32 copies). */
static bool kernel_can(const ut_tensor *t, unsigned cap) { return (ut_op_table(t->device)[t->op].caps & cap) != 0; }
static bool kernel_reads_16(const ut_tensor *t) { return kernel_can(t, UT_KCAP_READS_16); }
/* the kernel takes the op's tensors in their storage dtypes and does
 * autocast's rounding itself */
static bool kernel_native_16(const ut_tensor *t) { return kernel_can(t, UT_KCAP_NATIVE_16); }
static bool self_16(const ut_tensor *t) { return kernel_can(t, UT_KCAP_WRITES_16) && ut_dtype_is16(t->dtype); }

bool ut_lowp_needed(const ut_tensor *t, bool backward) {
    if (t->op == UT_OP_CHECKPOINT || (ut_op_is(t->op, UT_OPP_NO_DATA) && !backward)) return false;
    if (kernel_reads_16(t) || kernel_native_16(t)) return false;
    if (t->autocast != UT_F32 || ut_dtype_is16(t->dtype)) return true;
    for (int i = 0; i < UT_MAX_SRC; i++)
        if (t->src[i] && ut_dtype_is16(t->src[i]->dtype)) return true;
    return false;
}

/* *buf (device memory of *cap bytes) made at least bytes long: a smaller one
 * is replaced, never shrunk, and kept until the context is freed, so warm
 * steps allocate nothing. */
static void *grow(ut_ctx *ctx, void **buf, size_t *cap, size_t bytes) {
    if (*cap < bytes) {
        const ut_backend *b = ut_backend_get(ctx->device);
        if (*buf) b->free(*buf);
        *buf = b->alloc(bytes);
        *cap = bytes;
    }
    return *buf;
}

/* ---- conversion scratch: one buffer that the running op takes from ----
 * An op's float32 copies (its sources, its output, their gradients, its
 * kernel's own) are taken one after another from one buffer the context
 * keeps, and all given back when the op ends: the scratch costs the needs of
 * the op that needs most, not the largest copy of each kind added up. What
 * does not fit is allocated apart for the op, and the buffer grows to the
 * op's needs when it ends, so warm steps allocate nothing. */
#define TAKE_ALIGN 64

static float *take(ut_ctx *ctx, size_t bytes) {
    bytes = (bytes + TAKE_ALIGN - 1) / TAKE_ALIGN * TAKE_ALIGN;
    ctx->ac_need += bytes;
    if (ctx->ac_used + bytes <= ctx->ac_cap) {
        float *p = (float *)((char *)ctx->ac_pool + ctx->ac_used);
        ctx->ac_used += bytes;
        return p;
    }
    UT_ASSERT(ctx->ac_nspill < UT_AUTOCAST_SPILLS);
    return ctx->ac_spill[ctx->ac_nspill++] = ut_backend_get(ctx->device)->alloc(bytes);
}

/* The op has ended: everything it took is free again. */
static void give_back(ut_ctx *ctx) {
    const ut_backend *b = ut_backend_get(ctx->device);
    for (int i = 0; i < ctx->ac_nspill; i++) b->free(ctx->ac_spill[i]);
    if (ctx->ac_need > ctx->ac_cap) {
        if (ctx->ac_pool) b->free(ctx->ac_pool);
        ctx->ac_pool = b->alloc(ctx->ac_need);
        ctx->ac_cap = ctx->ac_need;
    }
    ctx->ac_nspill = 0, ctx->ac_used = 0, ctx->ac_need = 0;
}

float *ut_autocast_scratch(ut_ctx *ctx, size_t bytes) { return take(ctx, bytes); }
void ut_autocast_release(ut_ctx *ctx) { give_back(ctx); }

/* A parameter (or a view of one) rounded for an autocast op by a forward,
 * kept so that the op's backward (and a checkpointed block's recompute) reads
 * it instead of rounding the same weights again. A forward always rounds
 * afresh (the optimizer may have changed the weights since); only backward
 * reads, and between a forward and its backward the weights cannot change. */
struct ut_round_entry {
    const ut_tensor *key; /* the source tensor, as the op holds it */
    const void *src;      /* its data pointer when rounded */
    int64_t n;
    ut_dtype dt;
    bool valid;
    void *buf; /* n elements of dt */
    size_t cap;
};

void ut_autocast_free(ut_ctx *ctx) {
    const ut_backend *b = ut_backend_get(ctx->device);
    if (ctx->ac_pool) b->free(ctx->ac_pool);
    for (int i = 0; i < UT_MAX_SRC; i++)
        if (ctx->wide_buf[i]) b->free(ctx->wide_buf[i]);
    for (int i = 0; i < ctx->rc_len; i++)
        if (ctx->rc[i].buf) b->free(ctx->rc[i].buf);
    ut_free(ctx->rc);
}

/* The 16-bit rounded copies and the float32 buffers they are widened into. */
size_t ut_ctx_autocast_round_bytes(const ut_ctx *ctx) {
    size_t b = 0;
    for (int i = 0; i < ctx->rc_len; i++) b += ctx->rc[i].cap;
    for (int i = 0; i < UT_MAX_SRC; i++) b += ctx->wide_cap[i];
    return b;
}

size_t ut_ctx_autocast_scratch_bytes(const ut_ctx *ctx) { return ctx->ac_cap; }

void ut_autocast_forget(ut_ctx *ctx) {
    for (int i = 0; i < ctx->rc_len; i++) ctx->rc[i].valid = false, ctx->rc[i].key = NULL;
}

/* The valid rounded copy of s (dt, n elements from s->data), or NULL. */
static void *cached_round(ut_ctx *ctx, const ut_tensor *s, int64_t n, ut_dtype dt) {
    for (int i = 0; i < ctx->rc_len; i++) {
        struct ut_round_entry *e = &ctx->rc[i];
        if (e->key == s) return e->valid && e->src == s->data && e->n == n && e->dt == dt ? e->buf : NULL;
    }
    return NULL;
}

/* The free entry whose buffer fits bytes most tightly, else any free one. A
 * step that rounds the same sizes as the one before finds each an exact fit,
 * so warm steps allocate nothing. */
static struct ut_round_entry *free_entry(ut_ctx *ctx, size_t bytes) {
    struct ut_round_entry *best = NULL;
    for (int i = 0; i < ctx->rc_len; i++) {
        struct ut_round_entry *e = &ctx->rc[i];
        if (e->key) continue;
        bool fits = e->cap >= bytes, best_fits = best && best->cap >= bytes;
        if (!best || (fits && (!best_fits || e->cap < best->cap)) || (!fits && !best_fits && e->cap > best->cap))
            best = e;
    }
    return best;
}

/* An entry for s with room for n 16-bit values: s's own, else a free one, else a new one. */
static struct ut_round_entry *round_entry(ut_ctx *ctx, const ut_tensor *s, int64_t n) {
    size_t bytes = (size_t)n * 2;
    struct ut_round_entry *e = NULL;
    for (int i = 0; i < ctx->rc_len && !e; i++)
        if (ctx->rc[i].key == s) e = &ctx->rc[i];
    if (!e) e = free_entry(ctx, bytes);
    if (!e) {
        if (ctx->rc_len == ctx->rc_cap) {
            ctx->rc_cap = ctx->rc_cap ? 2 * ctx->rc_cap : 64;
            ctx->rc = ut_realloc_check(ctx->rc, (size_t)ctx->rc_cap * sizeof *ctx->rc);
        }
        e = &ctx->rc[ctx->rc_len++];
        *e = (struct ut_round_entry){0};
    }
    grow(ctx, &e->buf, &e->cap, bytes);
    e->key = s, e->valid = false;
    return e;
}

/* Elements from a tensor's data pointer to its last element (strides are
 * non-negative): a view's float32 copy keeps the view's strides. */
static int64_t span(const ut_tensor *t) {
    int64_t n = 1;
    for (int i = 0; i < t->ndim; i++) {
        if (t->ne[i] == 0) return 0;
        n += (t->ne[i] - 1) * t->nb[i];
    }
    return n;
}

/* What a swap replaced, to put back: per source, then the op's own tensor. */
typedef struct {
    void *data[UT_MAX_SRC + 1];
    float *grad[UT_MAX_SRC + 1];
    ut_dtype dtype[UT_MAX_SRC + 1];
    bool grad_swapped[UT_MAX_SRC + 1];
} swap_state;

void ut_ctx_set_param_copies(ut_ctx *ctx, const float *flat, int64_t n, const void *copies, ut_dtype dt) {
    UT_ASSERT(!copies || (ut_dtype_is16(dt) && flat && n >= 0));
    ctx->pc_flat = copies ? flat : NULL;
    ctx->pc_n = copies ? n : 0;
    ctx->pc = copies;
    ctx->pc_dt = dt;
}

/* s's n elements in the parameters' current 16-bit copies, if they hold
 * them (aligned as the kernels' own buffers are), else NULL. Addresses are
 * compared as numbers: device memory is never read here. */
static const void *param_copy(const ut_ctx *ctx, const ut_tensor *s, int64_t n, ut_dtype dt) {
    if (!ctx->pc || dt != ctx->pc_dt) return NULL;
    uintptr_t a = (uintptr_t)s->data, lo = (uintptr_t)ctx->pc_flat;
    if (a < lo || (a - lo) % sizeof(float)) return NULL;
    uintptr_t i = (a - lo) / sizeof(float);
    if (i > (uintptr_t)ctx->pc_n || (uintptr_t)n > (uintptr_t)ctx->pc_n - i) return NULL;
    const char *r = (const char *)ctx->pc + i * 2;
    return (uintptr_t)r % 16 ? NULL : r;
}

const void *ut_autocast_round16(ut_ctx *ctx, const ut_tensor *s, int64_t n, ut_dtype dt, bool backward) {
    UT_ASSERT(ut_dtype_is16(dt) && s->dtype == UT_F32);
    const void *pc = param_copy(ctx, s, n, dt);
    if (pc) return pc;
    void *r = backward ? cached_round(ctx, s, n, dt) : NULL;
    if (!r && ctx->grad_enabled) { /* a backward will follow: keep the copy */
        struct ut_round_entry *e = round_entry(ctx, s, n);
        ut_backend_get(s->device)->convert(e->buf, dt, s->data, UT_F32, n);
        e->src = s->data, e->n = n, e->dt = dt, e->valid = true;
        r = e->buf;
    }
    return r;
}

/* s's data as float32 in scratch buffer i: converted from 16 bits, or (when
 * round is BF16/F16) a float32 s rounded to it; a parameter's rounded copy is
 * kept in 16 bits (ut_autocast_round16) and widened into wide buffer i. */
static void swap_data(ut_ctx *ctx, ut_tensor *s, int i, ut_dtype round, bool backward) {
    if (s->dtype == UT_F32 && round == UT_F32) return;
    const ut_backend *b = ut_backend_get(s->device);
    int64_t n = span(s);
    if (s->dtype == UT_F32 && i < UT_MAX_SRC && ut_param_behind(s) >= 0) {
        const void *r16 = ut_autocast_round16(ctx, s, n, round, backward);
        if (r16) {
            float *w = grow(ctx, &ctx->wide_buf[i], &ctx->wide_cap[i], (size_t)n * sizeof(float));
            b->convert(w, UT_F32, r16, round, n);
            s->data = w;
            return;
        }
    }
    float *r = take(ctx, (size_t)n * sizeof(float));
    if (s->dtype == UT_F32) b->round(r, s->data, n, round);
    else b->convert(r, UT_F32, s->data, s->dtype, n);
    s->data = r;
}

/* A 16-bit s's gradient (16-bit storage too) as float32 scratch, for the
 * kernel to read or add into. */
static void swap_grad(ut_ctx *ctx, ut_tensor *s, int i, swap_state *st) {
    int64_t n = ut_nelem(s);
    float *g = take(ctx, (size_t)n * sizeof(float));
    ut_backend_get(s->device)->convert(g, UT_F32, s->grad, s->dtype, n);
    s->grad = g;
    st->grad_swapped[i] = true;
}

/* Slot i (a source, or UT_MAX_SRC: the op's own tensor) as float32. A tensor
 * that is two sources is swapped once: its second slot finds it float32. */
static void swap_one(ut_ctx *ctx, ut_tensor *s, int i, ut_dtype round, bool data, bool backward,
                     swap_state *st) {
    st->data[i] = s->data, st->grad[i] = s->grad, st->dtype[i] = s->dtype;
    st->grad_swapped[i] = false;
    if (s->dtype != UT_F32 && !ut_dtype_is16(s->dtype)) return;
    if (ut_dtype_is16(s->dtype) && s->grad) swap_grad(ctx, s, i, st);
    if (data) swap_data(ctx, s, i, round, backward);
    s->dtype = UT_F32;
}

/* Sources (and, with self, t itself) as float32; t->autocast rounds float32
 * sources. data false: only gradients (ops whose kernels read no data);
 * backward of a UT_OPP_BWD_NO_OUT op converts its own gradient only. */
static void swap_in(ut_tensor *t, bool self, bool data, swap_state *st) {
    for (int i = 0; i < UT_MAX_SRC; i++) {
        st->data[i] = NULL;
        if (t->src[i]) swap_one(t->ctx, t->src[i], i, t->autocast, data, self, st);
    }
    if (self && self_16(t)) { /* the kernel reads its 16-bit gradient itself */
        st->data[UT_MAX_SRC] = t->data, st->grad[UT_MAX_SRC] = t->grad, st->dtype[UT_MAX_SRC] = t->dtype;
        st->grad_swapped[UT_MAX_SRC] = false;
    } else if (self) {
        swap_one(t->ctx, t, UT_MAX_SRC, UT_F32, data && !ut_op_is(t->op, UT_OPP_BWD_NO_OUT), self, st);
    }
}

static void restore(ut_tensor *s, int i, swap_state *st) {
    if (st->grad_swapped[i])
        ut_backend_get(s->device)->convert(st->grad[i], st->dtype[i], s->grad, UT_F32, ut_nelem(s));
    s->data = st->data[i], s->grad = st->grad[i], s->dtype = st->dtype[i];
}

/* Reverse order: a tensor that is two sources gets its own state back last.
 * Gradients the kernel added into go back to 16 bits. */
static void swap_out(ut_tensor *t, bool self, swap_state *st) {
    if (self) restore(t, UT_MAX_SRC, st);
    for (int i = UT_MAX_SRC - 1; i >= 0; i--)
        if (t->src[i]) restore(t->src[i], i, st);
}

void ut_lowp_forward(ut_tensor *t, ut_op_fn fwd, const ut_kctx *k) {
    swap_state st;
    swap_in(t, false, true, &st);
    void *out = t->data;
    ut_dtype dt = t->dtype;
    bool swap = ut_dtype_is16(dt) && !self_16(t); /* else the kernel writes the 16 bits */
    if (swap) {
        t->data = take(t->ctx, (size_t)ut_nelem(t) * sizeof(float));
        t->dtype = UT_F32;
    }
    fwd(t, k);
    swap_out(t, false, &st);
    const ut_backend *b = ut_backend_get(t->device);
    if (swap) b->convert(out, dt, t->data, UT_F32, ut_nelem(t));
    else if (!ut_dtype_is16(dt) && t->autocast != UT_F32 && !ut_op_is(t->op, UT_OPP_LOSS))
        b->round(t->data, t->data, ut_nelem(t), t->autocast);
    t->data = out, t->dtype = dt;
    give_back(t->ctx);
}

/* A 16-bit tensor's gradient is stored in its dtype (as PyTorch's is); the
 * kernels read and add into float32 copies. The incoming gradient of an
 * autocast op is rounded to its dtype (a 16-bit kernel reads it in 16 bits):
 * a 16-bit output's gradient already is. */
void ut_lowp_backward(ut_tensor *t, ut_op_fn bwd, const ut_kctx *k) {
    swap_state st;
    bool data = !ut_op_is(t->op, UT_OPP_NO_DATA);
    /* a 16-bit source gets its 16-bit buffer first, also where the op would
     * set a float32 one itself (UT_OPP_OWNS_SRC0_GRAD) */
    for (int i = 0; i < UT_MAX_SRC; i++)
        if (t->src[i] && t->src[i]->requires_grad && ut_dtype_is16(t->src[i]->dtype)) ut_grad(t->src[i]);
    swap_in(t, true, data, &st);
    float *grad = t->grad;
    if (t->autocast != UT_F32 && !ut_dtype_is16(st.dtype[UT_MAX_SRC]) && !ut_op_is(t->op, UT_OPP_LOSS)) {
        float *r = take(t->ctx, (size_t)ut_nelem(t) * sizeof(float));
        ut_backend_get(t->device)->round(r, grad, ut_nelem(t), t->autocast);
        t->grad = r;
    }
    bwd(t, k);
    t->grad = grad;
    swap_out(t, true, &st);
    give_back(t->ctx);
}
