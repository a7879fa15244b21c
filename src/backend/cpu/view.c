/* Views and copies: reshape, flatten, permute, transpose, slice, contiguous.
 * A view shares its source's data. Its gradient is contiguous in its own shape;
 * backward adds it into the source's gradient through "grad strides" and a
 * grad offset (ut_view_grad_strides, ut_view_grad_offset) that map view positions to source positions, so
 * views of views work whatever the data strides are. */
#include "cpu.h"
#include "../../ops/params.h"

/* ---- strided loops over up to 4 dims (shape padded with leading 1s) ---- */
static void pad4(int ndim, const int64_t *ne, const int64_t *st, int64_t *ne4, int64_t *st4) {
    int k = 4 - ndim;
    for (int i = 0; i < 4; i++) {
        ne4[i] = i < k ? 1 : ne[i - k];
        st4[i] = i < k ? 0 : st[i - k];
    }
}

void ut_strided_gather(float *dst, const float *src, int ndim, const int64_t *ne, const int64_t *st) {
    int64_t n[4], s[4];
    pad4(ndim, ne, st, n, s);
#pragma omp parallel for collapse(2) schedule(static)
    for (int64_t a = 0; a < n[0]; a++)
        for (int64_t b = 0; b < n[1]; b++) {
            float *d = dst + (a * n[1] + b) * n[2] * n[3];
            const float *p = src + a * s[0] + b * s[1];
            for (int64_t c = 0; c < n[2]; c++)
                for (int64_t e = 0; e < n[3]; e++) *d++ = p[c * s[2] + e * s[3]];
        }
}

void ut_strided_add(float *dst, const float *src, int ndim, const int64_t *ne, const int64_t *st) {
    int64_t n[4], s[4];
    pad4(ndim, ne, st, n, s);
    /* Parallel over the outer dims is safe: views map distinct positions to
     * distinct source positions (no overlapping strides). */
#pragma omp parallel for collapse(2) schedule(static)
    for (int64_t a = 0; a < n[0]; a++)
        for (int64_t b = 0; b < n[1]; b++) {
            const float *g = src + (a * n[1] + b) * n[2] * n[3];
            float *p = dst + a * s[0] + b * s[1];
            for (int64_t c = 0; c < n[2]; c++)
                for (int64_t e = 0; e < n[3]; e++) p[c * s[2] + e * s[3]] += *g++;
        }
}

/* ---- shared view backward ---- */
static void view_bwd(ut_tensor *t) {
    ut_tensor *a = t->src[0];
    if (!a->requires_grad) return;
    ut_strided_add(a->grad + ut_view_grad_offset(t), t->grad, t->ndim, t->ne,
                   ut_view_grad_strides(t));
}

/* dst (contiguous, shape ne) = int32 src read with strides st; index tensors
 * are small (a batch of token ids), so one serial loop */
static void strided_gather_i32(int32_t *dst, const int32_t *src, int ndim, const int64_t *ne,
                               const int64_t *st) {
    int64_t n[4], s[4];
    pad4(ndim, ne, st, n, s);
    for (int64_t i0 = 0; i0 < n[0]; i0++)
        for (int64_t i1 = 0; i1 < n[1]; i1++)
            for (int64_t i2 = 0; i2 < n[2]; i2++)
                for (int64_t i3 = 0; i3 < n[3]; i3++)
                    *dst++ = src[i0 * s[0] + i1 * s[1] + i2 * s[2] + i3 * s[3]];
}

void ut_contiguous_fwd_cpu(ut_tensor *t, UT_KCTX) {
    ut_tensor *a = t->src[0];
    if (a->dtype == UT_I32) {
        strided_gather_i32(ut_i32(t), ut_i32(a), a->ndim, a->ne, a->nb);
        return;
    }
    ut_strided_gather(ut_f32(t), ut_f32(a), a->ndim, a->ne, a->nb);
}

void ut_contiguous_bwd_cpu(ut_tensor *t, UT_KCTX) {
    ut_tensor *a = t->src[0];
    int64_t st[UT_MAX_DIMS];
    ut_contiguous_strides(st, a->ndim, a->ne);
    if (a->requires_grad) ut_strided_add(a->grad, t->grad, t->ndim, t->ne, st);
}

void ut_reshape_fwd_cpu(ut_tensor *t, UT_KCTX) { (void)t; }
void ut_reshape_bwd_cpu(ut_tensor *t, UT_KCTX) { view_bwd(t); }

void ut_permute_fwd_cpu(ut_tensor *t, UT_KCTX) { (void)t; }
void ut_permute_bwd_cpu(ut_tensor *t, UT_KCTX) { view_bwd(t); }

void ut_slice_fwd_cpu(ut_tensor *t, UT_KCTX) { (void)t; }
void ut_slice_bwd_cpu(ut_tensor *t, UT_KCTX) { view_bwd(t); }
