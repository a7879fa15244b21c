/* ut_concat_rows: two tensors one after the other along their first
 * dimension, as an op core implements once for every device (UT_OP_ANY in
 * ops.def): the forward is two copies (or conversions) through the device's
 * backend, the backward adds the two halves of the gradient into the
 * sources'. A pipeline stage of an encoder-decoder model sends the
 * encoder's states and the decoder's as one tensor with it. */
#include "internal.h"

ut_tensor *ut_concat_rows(ut_ctx *ctx, ut_tensor *a, ut_tensor *b) {
    ut_tensor *in[2] = {a, b};
    if (!ut_op_check(ctx, "concat_rows", 2, in, 0)) return NULL;
    bool same = a->ndim == b->ndim;
    for (int d = 1; same && d < a->ndim; d++) same = a->ne[d] == b->ne[d];
    if (!same) {
        ut_op_error(ctx, "concat_rows", 2, in, "the tensors differ in a dimension after the first");
        return NULL;
    }
    if (!ut_is_contiguous(a)) a = ut_contiguous(ctx, a);
    if (!ut_is_contiguous(b)) b = ut_contiguous(ctx, b);
    if (!a || !b) return NULL;
    int64_t ne[UT_MAX_DIMS];
    for (int d = 0; d < a->ndim; d++) ne[d] = a->ne[d];
    ne[0] += b->ne[0];
    ut_tensor *src[2] = {a, b};
    return ut_op_run(ut_op_new(ctx, UT_OP_CONCAT_ROWS, a->dtype == b->dtype ? a->dtype : UT_F32, a->ndim, ne, 2, src));
}

void ut_concat_rows_fwd(ut_tensor *t, UT_KCTX) {
    (void)k;
    const ut_backend *be = ut_backend_get(t->device);
    char *out = t->data;
    for (int i = 0; i < 2; i++) {
        const ut_tensor *s = t->src[i];
        int64_t n = ut_nelem(s);
        if (s->dtype == t->dtype) be->copy(out, s->data, (size_t)n * ut_dtype_size(s->dtype), UT_COPY_D2D);
        else be->convert(out, t->dtype, s->data, s->dtype, n);
        out += (size_t)n * ut_dtype_size(t->dtype);
    }
}

void ut_concat_rows_bwd(ut_tensor *t, UT_KCTX) {
    (void)k;
    const ut_backend *be = ut_backend_get(t->device);
    float *g = t->grad;
    for (int i = 0; i < 2; i++) {
        ut_tensor *s = t->src[i];
        int64_t n = ut_nelem(s);
        if (s->requires_grad) be->accumulate(s->grad, &g, 1, n, false);
        g += n;
    }
}
