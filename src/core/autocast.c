/* Autocast: the matrix products (linear, matmul, conv2d, attention) of a
 * context with a low-precision dtype take their operands rounded to it and
 * accumulate in float32, as PyTorch's CPU autocast runs them; every other op
 * (softmax, the losses, layer norm, reductions, elementwise ops) stays in
 * float32. The policy is recorded per op at construction (t->autocast), so
 * backward and checkpoint recomputes do what the forward did.
 *
 * This version keeps tensors in float32 storage: the kernels are the float32
 * ones, given operands rounded to the low-precision values (into scratch
 * buffers the context keeps) and their forward output rounded in place. The
 * numbers are those of a 16-bit kernel with a float32 accumulator; the
 * parameters' gradients add into their float32 buffers unrounded. */
#include "internal.h"

/* The ops autocast runs in low precision (PyTorch's "lower_precision_fp" list). */
static const bool autocast_op[UT_OP_COUNT] = {
    [UT_OP_LINEAR] = true, [UT_OP_MATMUL] = true, [UT_OP_CONV2D] = true, [UT_OP_ATTENTION] = true,
};

ut_dtype ut_ctx_set_autocast(ut_ctx *ctx, ut_dtype dt) {
    ut_dtype old = ctx->autocast;
    UT_ASSERT(dt == UT_F32 || dt == UT_BF16 || dt == UT_F16);
    ctx->autocast = dt;
    return old;
}

ut_dtype ut_ctx_autocast(const ut_ctx *ctx) { return ctx->autocast; }

void ut_autocast_mark(ut_ctx *ctx, ut_tensor *t) {
    if (ctx->autocast != UT_F32 && autocast_op[t->op]) t->autocast = ctx->autocast;
}

/* Scratch buffer i of at least n floats (device memory, kept until the
 * context is freed: warm steps allocate nothing). */
static float *scratch(ut_ctx *ctx, int i, int64_t n) {
    size_t bytes = (size_t)n * sizeof(float);
    if (ctx->ac_cap[i] < bytes) {
        const ut_backend *b = ut_backend_get(ctx->device);
        if (ctx->ac_buf[i]) b->free(ctx->ac_buf[i]);
        ctx->ac_buf[i] = b->alloc(bytes);
        ctx->ac_cap[i] = bytes;
    }
    return ctx->ac_buf[i];
}

void ut_autocast_free(ut_ctx *ctx) {
    const ut_backend *b = ut_backend_get(ctx->device);
    for (int i = 0; i < UT_AUTOCAST_BUFS; i++)
        if (ctx->ac_buf[i]) b->free(ctx->ac_buf[i]);
}

/* Points each float source of t at a rounded copy of its data; saved[] keeps
 * the real pointers. Sources are contiguous (the autocast ops make them so). */
static void swap_in(ut_tensor *t, void **saved) {
    const ut_backend *b = ut_backend_get(t->device);
    for (int i = 0; i < UT_MAX_SRC; i++) {
        ut_tensor *s = t->src[i];
        saved[i] = s ? s->data : NULL;
        if (!s || s->dtype != UT_F32) continue;
        UT_ASSERT(ut_is_contiguous(s));
        float *r = scratch(t->ctx, i, ut_nelem(s));
        b->round(r, s->data, ut_nelem(s), t->autocast);
        s->data = r;
    }
}

static void swap_out(ut_tensor *t, void **saved) {
    for (int i = UT_MAX_SRC - 1; i >= 0; i--)
        if (t->src[i]) t->src[i]->data = saved[i];
}

void ut_autocast_forward(ut_tensor *t, ut_op_fn fwd) {
    void *saved[UT_MAX_SRC];
    swap_in(t, saved);
    fwd(t);
    swap_out(t, saved);
    ut_backend_get(t->device)->round(t->data, t->data, ut_nelem(t), t->autocast);
}

/* The incoming gradient is rounded too (a 16-bit kernel reads it in 16 bits);
 * the sources' gradients accumulate in float32. */
void ut_autocast_backward(ut_tensor *t, ut_op_fn bwd) {
    void *saved[UT_MAX_SRC];
    float *grad = t->grad, *r = scratch(t->ctx, UT_MAX_SRC, ut_nelem(t));
    ut_backend_get(t->device)->round(r, grad, ut_nelem(t), t->autocast);
    swap_in(t, saved);
    t->grad = r;
    bwd(t);
    t->grad = grad;
    swap_out(t, saved);
}
