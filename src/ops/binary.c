/* Broadcasting binary ops: add and mul, b broadcast to a's shape.
 * ut_binary_b_strides(t): b's strides in a's 4-D frame (0 where b broadcasts).
 * Kernels: src/backend/cpu/binary.c. */
#include "internal.h"
#include "params.h"

static bool broadcast_strides(const ut_tensor *a, const ut_tensor *b, int64_t *st4) {
    if (b->ndim > a->ndim) return false;
    int64_t bst[UT_MAX_DIMS];
    ut_contiguous_strides(bst, b->ndim, b->ne);
    int off = a->ndim - b->ndim, pad = 4 - a->ndim;
    for (int i = 0; i < 4; i++) st4[i] = 0;
    for (int i = 0; i < b->ndim; i++) {
        if (b->ne[i] != a->ne[off + i] && b->ne[i] != 1) return false;
        st4[pad + off + i] = b->ne[i] == 1 ? 0 : bst[i];
    }
    return true;
}

static ut_tensor *binary(ut_ctx *ctx, int op, const char *name, ut_tensor *a, ut_tensor *b) {
    ut_tensor *src[2] = {a, b};
    if (!ut_op_check(ctx, name, 2, src, 0)) return NULL;
    int64_t st4[4];
    if (!broadcast_strides(a, b, st4)) {
        ut_op_error(ctx, name, 2, src,
                    "b must broadcast to a (b's dims, aligned right, equal to a's or 1)");
        return NULL;
    }
    src[0] = ut_contiguous(ctx, a);
    src[1] = ut_contiguous(ctx, b);
    ut_tensor *t = ut_op_new(ctx, op, UT_F32, a->ndim, a->ne, 2, src);
    if (!t) return NULL;
    ut_binary_set_b_strides(t, st4);
    return ut_op_run(t);
}

ut_tensor *ut_add(ut_ctx *ctx, ut_tensor *a, ut_tensor *b) { return binary(ctx, UT_OP_ADD, "add", a, b); }
ut_tensor *ut_mul(ut_ctx *ctx, ut_tensor *a, ut_tensor *b) { return binary(ctx, UT_OP_MUL, "mul", a, b); }
