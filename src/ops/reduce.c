/* Reductions to a scalar: sum and mean (double accumulation, fixed order).
 * Kernels: src/backend/cpu/reduce.c. */
#include "internal.h"

static ut_tensor *reduce(ut_ctx *ctx, int op, const char *name, ut_tensor *a) {
    if (!ut_op_check(ctx, name, 1, &a, 0)) return NULL;
    a = ut_contiguous(ctx, a);
    int64_t one = 1;
    return ut_op_run(ut_op_new(ctx, op, UT_F32, 1, &one, 1, &a));
}

ut_tensor *ut_sum(ut_ctx *ctx, ut_tensor *a) { return reduce(ctx, UT_OP_SUM, "sum", a); }
ut_tensor *ut_mean(ut_ctx *ctx, ut_tensor *a) { return reduce(ctx, UT_OP_MEAN, "mean", a); }
