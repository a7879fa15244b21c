/* Reverse-mode autograd: a reverse walk over the tape, calling each op's
 * backward, and activation checkpointing as an op whose backward reruns a
 * block of ops and walks its tape. */
#include <stdlib.h>

#include "internal.h"

/* Parameters used by a tape node: its sources, or a checkpointed block's list. */
typedef struct {
    ut_checkpoint_fn fn;
    void *user;
    ut_tensor **in;
    int n;
    ut_philox rng;   /* state at block entry: the recompute draws the same masks */
    int *params;     /* parameter indices the block uses */
    int nparams;
} checkpoint_rec;

/* A checkpoint node's saved buffer: its record. */
static inline checkpoint_rec *ckpt_rec(const ut_tensor *t) { return t->aux[0]; }
static inline void set_ckpt_rec(ut_tensor *t, checkpoint_rec *cr) { t->aux[0] = cr; }

static void note_first_use(ut_ctx *ctx, int pi, int pos) {
    if (pi >= ctx->first_use_cap) {
        int cap = ctx->first_use_cap ? ctx->first_use_cap : 64;
        while (cap <= pi) cap *= 2;
        ctx->first_use = ut_realloc_check(ctx->first_use, cap * sizeof(int));
        for (int i = ctx->first_use_cap; i < cap; i++) ctx->first_use[i] = -1;
        ctx->first_use_cap = cap;
    }
    if (ctx->first_use[pi] < 0 || pos < ctx->first_use[pi]) ctx->first_use[pi] = pos;
}

/* Calls fn(pi) for each parameter index node t uses. */
#define FOR_EACH_PARAM(t, pi, body)                                                   \
    do {                                                                              \
        if ((t)->op == UT_OP_CHECKPOINT) {                                            \
            const checkpoint_rec *cr_ = ckpt_rec(t);                                  \
            for (int k_ = 0; k_ < cr_->nparams; k_++) {                               \
                int pi = cr_->params[k_];                                             \
                body;                                                                 \
            }                                                                         \
        } else {                                                                      \
            for (int k_ = 0; k_ < UT_MAX_SRC; k_++)                                   \
                if ((t)->src[k_] && (t)->src[k_]->param_index >= 0) {                 \
                    int pi = (t)->src[k_]->param_index;                               \
                    body;                                                             \
                }                                                                     \
        }                                                                             \
    } while (0)

/* The gradients t's backward adds into (or writes), made where missing.
 * An op's output (not a leaf: parameters and inputs keep zeroed gradients
 * that outlive the step) whose gradient does not exist yet is given one
 * unzeroed when t's kernel writes gradients whole (UT_KCAP_FRESH_GRAD,
 * backend.h) and it appears once among t's sources (x + x adds twice into
 * one): the returned mask tells the kernel which (ut_kctx.fresh). The first
 * consumer in backward order writes it, later ones add. Every other one is
 * zeroed, and added to. With UT_FRESH_GRADS=0 none is fresh; with
 * UT_FRESH_GRADS=nan a fresh one is filled with NaNs first, so a kernel
 * that adds into one poisons the step (the tests' check).
 * Where t's gradient passes to a source unchanged (UT_KCAP_PASS_GRAD: add's
 * operands of its own shape and dtype), the first such source whose
 * gradient would be fresh takes t's gradient buffer itself (*passed): t's
 * gradient is complete when t's backward runs (every consumer of t came
 * after t on the tape) and nothing reads it afterwards, so the residual
 * stream's gradient moves down the layers without a copy. */
static bool same_layout(const ut_tensor *s, const ut_tensor *t) {
    if (s->dtype != t->dtype || s->ndim != t->ndim) return false;
    for (int i = 0; i < t->ndim; i++)
        if (s->ne[i] != t->ne[i]) return false;
    return true;
}

static unsigned source_grads(ut_ctx *ctx, ut_tensor *t, unsigned caps, bool lowp, unsigned *passed) {
    unsigned fresh = 0;
    bool can = ctx->fresh_grads && (caps & UT_KCAP_FRESH_GRAD) && !lowp;
    bool pass = can && (caps & UT_KCAP_PASS_GRAD);
    *passed = 0;
    for (int k = ut_op_is(t->op, UT_OPP_OWNS_SRC0_GRAD) ? 1 : 0; k < UT_MAX_SRC; k++) {
        ut_tensor *s = t->src[k];
        if (!s || !s->requires_grad) continue;
        bool once = true;
        for (int j = 0; j < UT_MAX_SRC; j++) once = once && (j == k || t->src[j] != s);
        if (can && once && !s->grad && s->op != UT_OP_NONE) {
            if (pass && !*passed && same_layout(s, t)) {
                s->grad = t->grad;
                *passed |= 1u << k;
                continue;
            }
            ut_grad_unzeroed(s, ctx->fresh_grads == 2);
            fresh |= 1u << k;
        } else {
            ut_grad(s);
        }
    }
    return fresh;
}

void ut_backward_range(ut_ctx *ctx, int lo, int hi, bool hooks) {
    const ut_op_vtable *ops = ut_op_table(ctx->device);
    for (int i = hi - 1; i >= lo && !ctx->has_err; i--) {
        ut_tensor *t = ctx->tape[i];
        if (t->grad) {
            bool lowp = ut_lowp_needed(t, true);
            unsigned passed;
            unsigned fresh = source_grads(ctx, t, ops[t->op].caps, lowp, &passed);
            ut_param_use(ctx, t->src, UT_MAX_SRC);
            ut_prof_mark t0 = ut_prof_begin(ctx);
            ut_kctx k = ut_ctx_launch(ctx, UT_OP_NONE); /* backward draws nothing */
            k.fresh = fresh;
            k.passed = passed;
            if (lowp) ut_lowp_backward(t, ops[t->op].backward, &k);
            else ops[t->op].backward(t, &k);
            ut_prof_end(ctx, t, 1, t0);
            ut_flops_count(ctx, t, true);
        }
        if (hooks && ctx->grad_hook)
            FOR_EACH_PARAM(t, pi, if (ctx->first_use[pi] == i) ctx->grad_hook(ctx->grad_hook_user, pi));
    }
}

/* What both entry points check of the tensor the walk starts from. */
static int check_root(ut_ctx *ctx, ut_tensor *t, const char *what) {
    if (ctx->has_err) return -1;
    if (!t) {
        ut_ctx_set_error(ctx, "backward: %s is NULL", what);
        return -1;
    }
    if (t->dtype != UT_F32) {
        ut_op_error(ctx, "backward", 1, &t, ut_fmt("%s must be f32", what));
        return -1;
    }
    if (!t->requires_grad) {
        ut_ctx_set_error(ctx, "backward: %s does not require grad (no parameter or input "
                              "with requires_grad reached it, or grad was disabled)", what);
        return -1;
    }
    return 0;
}

/* The walk over the whole tape, the gradient-ready hooks at each
 * parameter's first use. */
static int walk(ut_ctx *ctx) {
    for (int i = 0; i < ctx->first_use_cap; i++) ctx->first_use[i] = -1;
    for (int i = 0; i < ctx->tape_len; i++) {
        ut_tensor *t = ctx->tape[i];
        FOR_EACH_PARAM(t, pi, note_first_use(ctx, pi, i));
    }
    ut_backward_range(ctx, 0, ctx->tape_len, true);
    /* what the device has reported so far, without waiting for the step */
    if (ut_ctx_device_errors(ctx, false)) return -1;
    return ctx->has_err ? -1 : 0;
}

int ut_backward(ut_ctx *ctx, ut_tensor *loss) {
    if (check_root(ctx, loss, "loss")) return -1;
    if (ut_nelem(loss) != 1) {
        ut_op_error(ctx, "backward", 1, &loss, "loss must be an f32 scalar");
        return -1;
    }
    /* d loss / d loss = 1, added (the loss may already hold a gradient) on
     * the device, in stream order: no read back */
    float *g = ut_grad(loss), *one = ut_ctx_dalloc(ctx, sizeof *one);
    const float host_one = 1.0f;
    ctx->be->copy(one, &host_one, sizeof host_one, UT_COPY_H2D);
    ctx->be->accumulate(g, &one, 1, 1, false);
    return walk(ctx);
}

int ut_backward_from(ut_ctx *ctx, ut_tensor *t, const ut_tensor *grad) {
    if (check_root(ctx, t, "the tensor")) return -1;
    if (!grad) {
        ut_ctx_set_error(ctx, "backward: the gradient is NULL");
        return -1;
    }
    bool same = grad->ndim == t->ndim && grad->dtype == UT_F32 && grad->device == t->device &&
                ut_is_contiguous(grad);
    for (int d = 0; same && d < t->ndim; d++) same = grad->ne[d] == t->ne[d];
    if (!same) {
        ut_tensor *both[2] = {t, (ut_tensor *)grad};
        ut_op_error(ctx, "backward", 2, both, "the gradient must be a contiguous f32 tensor of the "
                                              "tensor's shape, on its device");
        return -1;
    }
    /* added, as the scalar loss's 1 is */
    float *g = ut_grad(t), *src = grad->data;
    ctx->be->accumulate(g, &src, 1, ut_nelem(t), false);
    return walk(ctx);
}

/* ---- activation checkpointing ---- */
ut_tensor *ut_checkpoint(ut_ctx *ctx, ut_checkpoint_fn fn, void *user, ut_tensor **in, int n) {
    if (ctx->has_err) return NULL;
    if (!ctx->grad_enabled) return fn(ctx, user, in, n);
    if (ctx->in_checkpoint) {
        ut_ctx_set_error(ctx, "checkpoint: blocks cannot be nested");
        return NULL;
    }
    for (int i = 0; i < n; i++)
        if (!in[i]) {
            ut_ctx_set_error(ctx, "checkpoint: input %d is NULL", i);
            return NULL;
        }
    checkpoint_rec *cr = ut_ctx_alloc(ctx, sizeof *cr);
    cr->fn = fn;
    cr->user = user;
    cr->n = n;
    cr->in = ut_ctx_alloc(ctx, (size_t)(n ? n : 1) * sizeof *cr->in);
    memcpy(cr->in, in, (size_t)n * sizeof *in);
    cr->rng = ctx->rng;

    /* run the block without a tape, into scratch memory */
    ctx->in_checkpoint = true;
    ctx->collecting = true;
    ctx->ncollected = 0;
    ctx->grad_enabled = false;
    ut_ctx_use_scratch(ctx, true);
    ut_tensor *y = fn(ctx, user, in, n);
    ut_ctx_use_scratch(ctx, false);
    ctx->grad_enabled = true;
    ctx->collecting = false;
    ctx->in_checkpoint = false;
    if (!y || ctx->has_err) {
        ut_ctx_reset_scratch(ctx);
        return NULL;
    }
    if (y->dtype != UT_F32) {
        ut_ctx_set_error(ctx, "checkpoint: the block must return an f32 tensor");
        return NULL;
    }

    /* keep only the output */
    ut_tensor *out = ut_op_new(ctx, UT_OP_CHECKPOINT, UT_F32, y->ndim, y->ne, 0, NULL);
    /* out = y made contiguous, by the backend's contiguous kernel (it reads
     * src[0] and writes out; out keeps no source) */
    out->src[0] = y;
    ut_kctx k = ut_ctx_launch(ctx, UT_OP_CONTIGUOUS);
    ut_op_table(ctx->device)[UT_OP_CONTIGUOUS].forward(out, &k);
    out->src[0] = NULL;
    ut_ctx_reset_scratch(ctx);
    cr->nparams = ctx->ncollected;
    cr->params = ut_ctx_alloc(ctx, (size_t)(cr->nparams ? cr->nparams : 1) * sizeof(int));
    if (cr->nparams) memcpy(cr->params, ctx->collected, (size_t)cr->nparams * sizeof(int));
    bool rg = cr->nparams > 0;
    for (int i = 0; i < n; i++) rg = rg || in[i]->requires_grad;
    out->requires_grad = rg;
    set_ckpt_rec(out, cr);
    if (rg) ut_tape_push(ctx, out);
    return out;
}

void ut_checkpoint_fwd(ut_tensor *t, UT_KCTX) { (void)t; /* computed in ut_checkpoint */ }

void ut_checkpoint_bwd(ut_tensor *t, UT_KCTX) { /* core's own op: it runs the block's ops through the context */
    ut_ctx *ctx = t->ctx;
    checkpoint_rec *cr = ckpt_rec(t);
    for (int i = 0; i < cr->n; i++)
        if (cr->in[i]->requires_grad) ut_grad(cr->in[i]);

    ut_philox saved = ctx->rng;
    bool grad_was = ctx->grad_enabled;
    ctx->grad_enabled = true;
    ctx->rng = cr->rng;
    ut_ctx_use_scratch(ctx, true);
    ctx->in_checkpoint = true;
    /* inputs as leaves whose gradients land directly in the real inputs' */
    ut_tensor **in = ut_ctx_alloc(ctx, (size_t)(cr->n ? cr->n : 1) * sizeof *in);
    for (int i = 0; i < cr->n; i++) {
        in[i] = ut_ctx_alloc(ctx, sizeof(ut_tensor));
        *in[i] = *cr->in[i];
        in[i]->op = UT_OP_NONE;
        memset(in[i]->src, 0, sizeof in[i]->src);
        in[i]->ctx = ctx;
    }
    int lo = ctx->tape_len;
    ctx->recomputing = true; /* its forward's FLOPs were counted when it first ran */
    ut_tensor *y = cr->fn(ctx, cr->user, in, cr->n);
    ctx->recomputing = false;
    if (y && !ctx->has_err && y->requires_grad) {
        ut_backend_get(t->device)->copy(ut_grad(y), t->grad, (size_t)ut_nelem(t) * ut_dtype_size(t->dtype),
                                        UT_COPY_D2D);
        ut_backward_range(ctx, lo, ctx->tape_len, false);
    }
    ctx->tape_len = lo;
    ctx->in_checkpoint = false;
    ut_ctx_use_scratch(ctx, false);
    ut_ctx_reset_scratch(ctx);
    ctx->rng = saved;
    ctx->grad_enabled = grad_was;
}
