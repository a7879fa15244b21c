/* Regression loss: mse = mean((a - b)^2) over all elements, a and b the same
 * shape, -> scalar (1). The sum runs over fixed blocks in parallel, one double
 * per block, then adds the blocks serially: the result does not depend on the
 * thread count.
 * Kernels: src/backend/cpu/loss.c. */
#include "internal.h"

ut_tensor *ut_mse(ut_ctx *ctx, ut_tensor *a, ut_tensor *b) {
    ut_tensor *src[2] = {a, b};
    if (!ut_op_check(ctx, "mse", 2, src, 0)) return NULL;
    bool same = a->ndim == b->ndim;
    for (int i = 0; same && i < a->ndim; i++) same = a->ne[i] == b->ne[i];
    if (!same) {
        ut_op_error(ctx, "mse", 2, src, "a and b must have the same shape");
        return NULL;
    }
    src[0] = ut_contiguous(ctx, a);
    src[1] = ut_contiguous(ctx, b);
    if (!src[0] || !src[1]) return NULL;
    int64_t one = 1;
    return ut_op_run(ut_op_new(ctx, UT_OP_MSE, UT_F32, 1, &one, 2, src));
}
