/* Views and copies: reshape, flatten, permute, transpose, slice, contiguous.
 * A view shares its source's data. Its gradient is contiguous in its own shape;
 * backward adds it into the source's gradient through "grad strides" and a
 * grad offset (ut_view_grad_strides, ut_view_grad_offset) that map view positions to source positions, so
 * views of views work whatever the data strides are.
 * Kernels: src/backend/cpu/view.c. */
#include "internal.h"
#include "params.h"

static ut_tensor *make_view(ut_ctx *ctx, int op, ut_tensor *a, int ndim, const int64_t *ne,
                            const int64_t *nb, int64_t off, const int64_t *gst, int64_t goff) {
    ut_tensor *t = ut_view_new(ctx, op, a, ndim, ne, nb, off);
    if (!t) return NULL;
    ut_view_set_grad_strides(t, ndim, gst);
    ut_view_set_grad_offset(t, goff);
    if (t->requires_grad) ut_tape_push(ctx, t);
    return t;
}

/* ---- contiguous ---- */
ut_tensor *ut_contiguous(ut_ctx *ctx, ut_tensor *a) {
    if (!ut_op_check(ctx, "contiguous", 1, &a, 0)) return NULL;
    if (ut_is_contiguous(a)) return a;
    return ut_op_run(ut_op_new(ctx, UT_OP_CONTIGUOUS, a->dtype, a->ndim, a->ne, 1, &a));
}

/* ---- reshape / flatten ---- */
ut_tensor *ut_reshape(ut_ctx *ctx, ut_tensor *a, int ndim, const int64_t *ne) {
    if (ctx->has_err || !a) return ut_op_check(ctx, "reshape", 1, &a, 0), NULL;
    if (ndim < 1 || ndim > UT_MAX_DIMS) {
        ut_op_error(ctx, "reshape", 1, &a, ut_fmt("cannot reshape to %d dimensions", ndim));
        return NULL;
    }
    int64_t shape[UT_MAX_DIMS], known = 1;
    int infer = -1;
    for (int i = 0; i < ndim; i++) {
        shape[i] = ne[i];
        if (ne[i] == -1 && infer < 0) infer = i;
        else if (ne[i] < 0) {
            ut_op_error(ctx, "reshape", 1, &a, "bad target size (negative, or two -1s)");
            return NULL;
        } else known *= ne[i];
    }
    int64_t n = ut_nelem(a);
    if (infer >= 0) shape[infer] = known ? n / known : 0;
    int64_t total = known * (infer >= 0 ? shape[infer] : 1);
    if (total != n) {
        char buf[128];
        size_t k = 0;
        for (int i = 0; i < ndim; i++)
            k += (size_t)snprintf(buf + k, sizeof buf - k, i ? ", %lld" : "%lld", (long long)ne[i]);
        ut_op_error(ctx, "reshape", 1, &a,
                    ut_fmt("%lld elements cannot take the shape (%s)", (long long)n, buf));
        return NULL;
    }
    if (a->dtype == UT_I32) {  /* index tensors: plain relabelling, no gradient */
        ut_tensor *t = ut_tensor_alias(ctx, a, ndim, shape);
        if (!ut_is_contiguous(a)) {
            ut_op_error(ctx, "reshape", 1, &a, "non-contiguous index tensors cannot be reshaped");
            return NULL;
        }
        return t;
    }
    a = ut_contiguous(ctx, a);
    if (!a) return NULL;
    int64_t st[UT_MAX_DIMS];
    ut_contiguous_strides(st, ndim, shape);
    return make_view(ctx, UT_OP_RESHAPE, a, ndim, shape, st, 0, st, 0);
}

ut_tensor *ut_flatten(ut_ctx *ctx, ut_tensor *a, int start_dim) {
    if (!a) return ut_op_check(ctx, "flatten", 1, &a, 0), NULL;
    if (start_dim < 0) start_dim += a->ndim;
    if (start_dim < 0 || start_dim >= a->ndim) {
        ut_op_error(ctx, "flatten", 1, &a, ut_fmt("start_dim %d out of range", start_dim));
        return NULL;
    }
    int64_t ne[UT_MAX_DIMS];
    for (int i = 0; i < start_dim; i++) ne[i] = a->ne[i];
    ne[start_dim] = 1;
    for (int i = start_dim; i < a->ndim; i++) ne[start_dim] *= a->ne[i];
    return ut_reshape(ctx, a, start_dim + 1, ne);
}

/* ---- permute / transpose ---- */
ut_tensor *ut_permute(ut_ctx *ctx, ut_tensor *a, const int *perm) {
    if (!ut_op_check(ctx, "permute", 1, &a, 0)) return NULL;
    int64_t ne[UT_MAX_DIMS], nb[UT_MAX_DIMS], gst[UT_MAX_DIMS], cst[UT_MAX_DIMS];
    int seen = 0;
    ut_contiguous_strides(cst, a->ndim, a->ne);
    for (int i = 0; i < a->ndim; i++) {
        int p = perm[i];
        if (p < 0 || p >= a->ndim || (seen >> p & 1)) {
            ut_op_error(ctx, "permute", 1, &a, "perm is not a permutation of the dimensions");
            return NULL;
        }
        seen |= 1 << p;
        ne[i] = a->ne[p];
        nb[i] = a->nb[p];
        gst[i] = cst[p];
    }
    return make_view(ctx, UT_OP_PERMUTE, a, a->ndim, ne, nb, 0, gst, 0);
}

ut_tensor *ut_transpose(ut_ctx *ctx, ut_tensor *a, int d0, int d1) {
    if (!ut_op_check(ctx, "transpose", 1, &a, 0)) return NULL;
    if (d0 < 0) d0 += a->ndim;
    if (d1 < 0) d1 += a->ndim;
    if (d0 < 0 || d1 < 0 || d0 >= a->ndim || d1 >= a->ndim) {
        ut_op_error(ctx, "transpose", 1, &a, ut_fmt("dims %d, %d out of range", d0, d1));
        return NULL;
    }
    int perm[UT_MAX_DIMS];
    for (int i = 0; i < a->ndim; i++) perm[i] = i;
    perm[d0] = d1;
    perm[d1] = d0;
    return ut_permute(ctx, a, perm);
}

/* ---- slice ---- */
ut_tensor *ut_slice(ut_ctx *ctx, ut_tensor *a, int dim, int64_t start, int64_t end) {
    if (!ut_op_check(ctx, "slice", 1, &a, 0)) return NULL;
    if (dim < 0) dim += a->ndim;
    if (dim < 0 || dim >= a->ndim || start < 0 || end > a->ne[dim] || start > end) {
        ut_op_error(ctx, "slice", 1, &a,
                    ut_fmt("range [%lld, %lld) of dim %d is out of bounds", (long long)start,
                           (long long)end, dim));
        return NULL;
    }
    int64_t ne[UT_MAX_DIMS], cst[UT_MAX_DIMS];
    ut_contiguous_strides(cst, a->ndim, a->ne);
    for (int i = 0; i < a->ndim; i++) ne[i] = a->ne[i];
    ne[dim] = end - start;
    return make_view(ctx, UT_OP_SLICE, a, a->ndim, ne, a->nb, start * a->nb[dim], cst,
                     start * cst[dim]);
}
