/* Softmax family over the last dimension: softmax, log_softmax, and the two
 * classification losses, cross_entropy (fused log-softmax + NLL) and nll_loss.
 * Inputs are viewed as N rows of V. Rows are independent, so kernels run one
 * row per iteration in parallel; each row subtracts its max before exp (no
 * overflow) and sums the exps in double. exp is ut_expf_fast, so the row loops
 * vectorise; a row's reduction order is fixed by the code, not by threads. Losses keep one double per row and
 * add the rows serially, so results do not depend on the thread count.
 * Kernels: src/backend/cpu/softmax.c. */
#include "internal.h"
#include "params.h"

/* Validates a, makes it contiguous and returns an unrun output with a's shape. */
static ut_tensor *rowwise_new(ut_ctx *ctx, int op, const char *name, ut_tensor *a) {
    if (!ut_op_check(ctx, name, 1, &a, 0)) return NULL;
    if (a->ndim < 1) {
        ut_op_error(ctx, name, 1, &a, "expected at least one dimension (..., V)");
        return NULL;
    }
    a = ut_contiguous(ctx, a);
    if (!a) return NULL;
    return ut_op_new(ctx, op, UT_F32, a->ndim, a->ne, 1, &a);
}

ut_tensor *ut_softmax(ut_ctx *ctx, ut_tensor *a) {
    return ut_op_run(rowwise_new(ctx, UT_OP_SOFTMAX, "softmax", a));
}

ut_tensor *ut_log_softmax(ut_ctx *ctx, ut_tensor *a) {
    return ut_op_run(rowwise_new(ctx, UT_OP_LOG_SOFTMAX, "log_softmax", a));
}

/* ---- losses over targets: x (..., V) f32, targets (...) i32 -> scalar (1).
 * Parameters ut_loss_ignore_index, ut_loss_smoothing (label smoothing eps)
 * and ut_loss_count, the number of targets that are not ignored (the mean's
 * divisor). When every target is ignored the
 * loss is 0 and so is the gradient (PyTorch returns nan there: 0/0). ---- */
bool ut_loss_targets_fit(ut_ctx *ctx, const char *name, int n, ut_tensor *const *src, const ut_tensor *x,
                         const ut_tensor *targets) {
    bool ok = x->ndim >= 1 && targets->ndim == x->ndim - 1;
    for (int i = 0; ok && i < targets->ndim; i++) ok = targets->ne[i] == x->ne[i];
    if (!ok) {
        ut_op_error(ctx, name, n, src, "expected input (..., V) and targets (...) with the same leading dims");
        return false;
    }
    if (!ut_is_contiguous(targets)) {
        ut_op_error(ctx, name, n, src, "targets must be contiguous");
        return false;
    }
    return true;
}

static ut_tensor *target_loss_new(ut_ctx *ctx, int op, const char *name, ut_tensor *x,
                                  ut_tensor *targets, int ignore_index, float eps) {
    ut_tensor *src[2] = {x, targets};
    if (!ut_op_check(ctx, name, 2, src, 1u << 1)) return NULL;
    if (!(eps >= 0.0f && eps <= 1.0f)) {
        ut_op_error(ctx, name, 2, src, ut_fmt("label smoothing %g is not in [0, 1]", (double)eps));
        return NULL;
    }
    if (!ut_loss_targets_fit(ctx, name, 2, src, x, targets)) return NULL;
    src[0] = ut_contiguous(ctx, x);
    if (!src[0]) return NULL;
    int64_t one = 1;
    ut_tensor *t = ut_op_new(ctx, op, UT_F32, 1, &one, 2, src);
    if (!t) return NULL;
    ut_loss_set_ignore_index(t, ignore_index);
    ut_loss_set_smoothing(t, eps);
    return t;
}

ut_tensor *ut_cross_entropy_smoothed(ut_ctx *ctx, ut_tensor *logits, ut_tensor *targets, int ignore_index,
                                     float eps) {
    return ut_op_run(
        target_loss_new(ctx, UT_OP_CROSS_ENTROPY, "cross_entropy", logits, targets, ignore_index, eps));
}

ut_tensor *ut_cross_entropy(ut_ctx *ctx, ut_tensor *logits, ut_tensor *targets, int ignore_index) {
    return ut_cross_entropy_smoothed(ctx, logits, targets, ignore_index, ctx ? ctx->label_smoothing : 0.0f);
}

ut_tensor *ut_nll_loss_smoothed(ut_ctx *ctx, ut_tensor *logp, ut_tensor *targets, int ignore_index, float eps) {
    return ut_op_run(target_loss_new(ctx, UT_OP_NLL_LOSS, "nll_loss", logp, targets, ignore_index, eps));
}

ut_tensor *ut_nll_loss(ut_ctx *ctx, ut_tensor *logp, ut_tensor *targets, int ignore_index) {
    return ut_nll_loss_smoothed(ctx, logp, targets, ignore_index, ctx ? ctx->label_smoothing : 0.0f);
}
