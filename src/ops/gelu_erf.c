/* Exact GELU, as torch.nn.functional.gelu(x) (approximate='none') and BERT's
 * hidden_act "gelu": out = 0.5 x (1 + erf(x / sqrt(2))).
 * Kernels: src/backend/cpu/gelu_erf.c. */
#include "internal.h"

ut_tensor *ut_gelu_erf(ut_ctx *ctx, ut_tensor *a) {
    if (!ut_op_check(ctx, "gelu_erf", 1, &a, 0)) return NULL;
    a = ut_contiguous(ctx, a);
    if (!a) return NULL;
    return ut_op_run(ut_op_new(ctx, UT_OP_GELU_ERF, UT_F32, a->ndim, a->ne, 1, &a));
}
