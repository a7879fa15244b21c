/* Elementwise unary ops: scale, relu, gelu (tanh approximation), tanh,
 * sigmoid, dropout, uniform noise. Inputs are made contiguous in the
 * constructor, so every kernel is a flat loop over N elements. Backward
 * formulas follow PyTorch's (relu masks on x > 0; tanh and sigmoid use the
 * saved output). Kernels: src/backend/cpu/unary.c. */
#include "internal.h"
#include "params.h"

/* Validates a, makes it contiguous and returns an unrun output of op with a's
 * shape (NULL on error); the caller sets parameters and calls ut_op_run. */
static ut_tensor *unary_new(ut_ctx *ctx, int op, const char *name, ut_tensor *a) {
    if (!ut_op_check(ctx, name, 1, &a, 0)) return NULL;
    a = ut_contiguous(ctx, a);
    if (!a) return NULL;
    return ut_op_new(ctx, op, UT_F32, a->ndim, a->ne, 1, &a);
}

ut_tensor *ut_scale(ut_ctx *ctx, ut_tensor *a, float s) {
    ut_tensor *t = unary_new(ctx, UT_OP_SCALE, "scale", a);
    if (!t) return NULL;
    ut_scale_set_s(t, s);
    return ut_op_run(t);
}

ut_tensor *ut_relu(ut_ctx *ctx, ut_tensor *a) {
    return ut_op_run(unary_new(ctx, UT_OP_RELU, "relu", a));
}

ut_tensor *ut_gelu(ut_ctx *ctx, ut_tensor *a) {
    return ut_op_run(unary_new(ctx, UT_OP_GELU, "gelu", a));
}

ut_tensor *ut_tanh(ut_ctx *ctx, ut_tensor *a) {
    return ut_op_run(unary_new(ctx, UT_OP_TANH, "tanh", a));
}

ut_tensor *ut_sigmoid(ut_ctx *ctx, ut_tensor *a) {
    return ut_op_run(unary_new(ctx, UT_OP_SIGMOID, "sigmoid", a));
}

ut_tensor *ut_dropout(ut_ctx *ctx, ut_tensor *a, float p) { return ut_dropout_cols(ctx, a, p, 0, 0); }

ut_tensor *ut_dropout_cols(ut_ctx *ctx, ut_tensor *a, float p, int64_t col0, int64_t cols_all) {
    if (!ut_op_check(ctx, "dropout", 1, &a, 0)) return NULL;
    if (cols_all && (a->ndim < 1 || col0 < 0 || col0 + a->ne[a->ndim - 1] > cols_all)) {
        ut_op_error(ctx, "dropout", 1, &a,
                    ut_fmt("columns [%lld, %lld + last dim) are not columns of %lld", (long long)col0,
                           (long long)col0, (long long)cols_all));
        return NULL;
    }
    if (!(p >= 0.0f && p < 1.0f)) { /* also rejects NaN */
        ut_op_error(ctx, "dropout", 1, &a, ut_fmt("p = %g is outside [0, 1)", (double)p));
        return NULL;
    }
    if (!ctx->training || p == 0.0f) return a; /* identity: nothing to record */
    ut_tensor *t = unary_new(ctx, UT_OP_DROPOUT, "dropout", a);
    if (!t) return NULL;
    ut_dropout_set_p(t, p);
    ut_dropout_set_keep_scale(t, 1.0f / (1.0f - p));
    ut_dropout_set_col0(t, col0);
    ut_dropout_set_cols_all(t, cols_all);
    return ut_op_run(t);
}

ut_tensor *ut_uniform_noise(ut_ctx *ctx, ut_tensor *a, float mag) {
    if (!ut_op_check(ctx, "uniform_noise", 1, &a, 0)) return NULL;
    if (!(mag >= 0.0f) || isinf(mag)) { /* also rejects NaN */
        ut_op_error(ctx, "uniform_noise", 1, &a, ut_fmt("mag = %g is not a finite number >= 0", (double)mag));
        return NULL;
    }
    if (!ctx->training || mag == 0.0f) return a; /* identity: nothing to record */
    ut_tensor *t = unary_new(ctx, UT_OP_UNIFORM_NOISE, "uniform_noise", a);
    if (!t) return NULL;
    ut_uniform_noise_set_mag(t, mag);
    return ut_op_run(t);
}
