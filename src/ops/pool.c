/* 2-D max pooling as torch.nn.functional.max_pool2d (no padding, dilation 1,
 * floor mode). Saves the argmax of each output within its input plane
 * (int32, ut_max_pool2d_argmax). Parameters: ut_max_pool2d_kernel, ut_max_pool2d_stride.
 * Kernels: src/backend/cpu/pool.c. */
#include "internal.h"
#include "params.h"

ut_tensor *ut_max_pool2d(ut_ctx *ctx, ut_tensor *x, int k, int stride) {
    if (!ut_op_check(ctx, "max_pool2d", 1, &x, 0)) return NULL;
    if (x->ndim != 4) {
        ut_op_error(ctx, "max_pool2d", 1, &x, "expected x (B, C, H, W)");
        return NULL;
    }
    if (k < 1 || stride < 1 || x->ne[2] < k || x->ne[3] < k) {
        ut_op_error(ctx, "max_pool2d", 1, &x,
                    ut_fmt("kernel %d and stride %d must be >= 1, kernel at most H and W", k,
                           stride));
        return NULL;
    }
    x = ut_contiguous(ctx, x);
    int64_t ne[4] = {x->ne[0], x->ne[1], (x->ne[2] - k) / stride + 1, (x->ne[3] - k) / stride + 1};
    ut_tensor *t = ut_op_new(ctx, UT_OP_MAX_POOL2D, UT_F32, 4, ne, 1, &x);
    if (!t) return NULL;
    ut_max_pool2d_set_kernel(t, k);
    ut_max_pool2d_set_stride(t, stride);
    return ut_op_run(t);
}
