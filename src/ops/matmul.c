/* Matrix products through sgemm: linear (x W^T + b) and batched matmul.
 * Kernels: src/backend/cpu/matmul.c. */

#include "internal.h"
#include "params.h"

static ut_tensor *linear_new(ut_ctx *ctx, ut_tensor *x, ut_tensor *w, ut_tensor *b, int act) {
    ut_tensor *src[3] = {x, w, b};
    if (!ut_op_check(ctx, "linear", b ? 3 : 2, src, 0)) return NULL;
    int64_t C = x->ne[x->ndim - 1];
    if (w->ndim != 2 || w->ne[1] != C || (b && (b->ndim != 1 || b->ne[0] != w->ne[0]))) {
        ut_op_error(ctx, "linear", b ? 3 : 2, src,
                    "expected x (..., C), weight (OC, C), bias (OC)");
        return NULL;
    }
    x = ut_contiguous(ctx, x);
    w = ut_contiguous(ctx, w);
    src[0] = x;
    src[1] = w;
    int64_t ne[UT_MAX_DIMS];
    for (int i = 0; i < x->ndim; i++) ne[i] = x->ne[i];
    ne[x->ndim - 1] = w->ne[0];
    ut_tensor *t = ut_op_new(ctx, UT_OP_LINEAR, UT_F32, x->ndim, ne, 3, src);
    if (t) ut_linear_set_act(t, act);
    return ut_op_run(t);
}

ut_tensor *ut_linear(ut_ctx *ctx, ut_tensor *x, ut_tensor *w, ut_tensor *b) {
    return linear_new(ctx, x, w, b, UT_LINEAR_PLAIN);
}

/* One op where the device's linear kernels apply GELU themselves (backend.h,
 * linear_gelu) and the context fuses (UT_LINEAR_GELU, src/core/ctx.c) */
ut_tensor *ut_linear_gelu(ut_ctx *ctx, ut_tensor *x, ut_tensor *w, ut_tensor *b) {
    const ut_backend *be = x ? ut_backend_get(x->device) : NULL;
    if (be && be->linear_gelu && ctx->fuse_linear_gelu) return linear_new(ctx, x, w, b, UT_LINEAR_GELU);
    return ut_gelu(ctx, ut_linear(ctx, x, w, b));
}

/* One op where the context fuses (UT_LINEAR_CE, src/core/ctx.c); checked
 * as the two ops check their inputs, with their messages' names */
ut_tensor *ut_linear_cross_entropy(ut_ctx *ctx, ut_tensor *x, ut_tensor *w, ut_tensor *b, ut_tensor *targets,
                                   int ignore_index) {
    if (!ctx || !ctx->fuse_linear_ce)
        return ut_cross_entropy(ctx, ut_linear(ctx, x, w, b), targets, ignore_index);
    const char *name = "linear_cross_entropy";
    ut_tensor *src[4] = {x, w, targets, b};
    if (!ut_op_check(ctx, name, b ? 4 : 3, src, 1u << 2)) return NULL;
    int64_t C = x->ne[x->ndim - 1];
    if (w->ndim != 2 || w->ne[1] != C || (b && (b->ndim != 1 || b->ne[0] != w->ne[0]))) {
        ut_op_error(ctx, name, b ? 4 : 3, src, "expected x (..., C), weight (V, C), targets (...), bias (V)");
        return NULL;
    }
    if (!ut_loss_targets_fit(ctx, name, b ? 4 : 3, src, x, targets)) return NULL;
    ut_tensor *in[4] = {ut_contiguous(ctx, x), ut_contiguous(ctx, w), targets, b};
    if (!in[0] || !in[1]) return NULL;
    int64_t one = 1;
    ut_tensor *t = ut_op_new(ctx, UT_OP_LINEAR_CE, UT_F32, 1, &one, b ? 4 : 3, in);
    if (!t) return NULL;
    ut_loss_set_ignore_index(t, ignore_index);
    ut_loss_set_smoothing(t, ctx->label_smoothing); /* in [0, 1]: ut_ctx_set_label_smoothing */
    return ut_op_run(t);
}

/* ---- matmul: a (..., M, K) @ b (..., K, N); b may be 2-D and shared ---- */
ut_tensor *ut_matmul(ut_ctx *ctx, ut_tensor *a, ut_tensor *b) {
    ut_tensor *src[2] = {a, b};
    if (!ut_op_check(ctx, "matmul", 2, src, 0)) return NULL;
    bool ok = a->ndim >= 2 && b->ndim >= 2 && a->ne[a->ndim - 1] == b->ne[b->ndim - 2];
    if (ok && b->ndim > 2) {
        ok = b->ndim == a->ndim;
        for (int i = 0; ok && i < a->ndim - 2; i++) ok = a->ne[i] == b->ne[i];
    }
    if (!ok) {
        ut_op_error(ctx, "matmul", 2, src,
                    "expected a (..., M, K) and b (K, N) or (..., K, N) with equal batch dims");
        return NULL;
    }
    src[0] = ut_contiguous(ctx, a);
    src[1] = ut_contiguous(ctx, b);
    int64_t ne[UT_MAX_DIMS];
    for (int i = 0; i < a->ndim; i++) ne[i] = a->ne[i];
    ne[a->ndim - 1] = b->ne[b->ndim - 1];
    return ut_op_run(ut_op_new(ctx, UT_OP_MATMUL, UT_F32, a->ndim, ne, 2, src));
}
