/* Layer normalisation over the last dimension, as torch.nn.functional.layer_norm
 * with biased variance. Saves mean and rstd per row (ut_layernorm_mean, ut_layernorm_rstd).
 * RMS normalisation over the last dimension, as T5's T5LayerNorm (no mean, no
 * bias). Saves rstd per row (ut_rms_norm_rstd).
 * Kernels: src/backend/cpu/norm.c. */
#include "internal.h"
#include "params.h"

ut_tensor *ut_layernorm(ut_ctx *ctx, ut_tensor *x, ut_tensor *w, ut_tensor *b, float eps) {
    ut_tensor *src[3] = {x, w, b};
    if (!ut_op_check(ctx, "layernorm", 3, src, 0)) return NULL;
    int64_t C = x->ndim > 0 ? x->ne[x->ndim - 1] : 0;
    if (C < 1 || w->ndim != 1 || w->ne[0] != C || b->ndim != 1 || b->ne[0] != C) {
        ut_op_error(ctx, "layernorm", 3, src, "expected x (..., C), weight (C), bias (C)");
        return NULL;
    }
    if (!(eps >= 0.0f)) {
        ut_op_error(ctx, "layernorm", 3, src, ut_fmt("eps %g must be >= 0", (double)eps));
        return NULL;
    }
    for (int i = 0; i < 3; i++) src[i] = ut_contiguous(ctx, src[i]);
    ut_tensor *t = ut_op_new(ctx, UT_OP_LAYERNORM, UT_F32, x->ndim, x->ne, 3, src);
    if (!t) return NULL;
    ut_layernorm_set_eps(t, eps);
    return ut_op_run(t);
}

ut_tensor *ut_rms_norm(ut_ctx *ctx, ut_tensor *x, ut_tensor *w, float eps) {
    ut_tensor *src[2] = {x, w};
    if (!ut_op_check(ctx, "rms_norm", 2, src, 0)) return NULL;
    int64_t C = x->ndim > 0 ? x->ne[x->ndim - 1] : 0;
    if (C < 1 || w->ndim != 1 || w->ne[0] != C) {
        ut_op_error(ctx, "rms_norm", 2, src, "expected x (..., C), weight (C)");
        return NULL;
    }
    if (!(eps >= 0.0f)) {
        ut_op_error(ctx, "rms_norm", 2, src, ut_fmt("eps %g must be >= 0", (double)eps));
        return NULL;
    }
    for (int i = 0; i < 2; i++) src[i] = ut_contiguous(ctx, src[i]);
    ut_tensor *t = ut_op_new(ctx, UT_OP_RMS_NORM, UT_F32, x->ndim, x->ne, 2, src);
    if (!t) return NULL;
    ut_rms_norm_set_eps(t, eps);
    return ut_op_run(t);
}
