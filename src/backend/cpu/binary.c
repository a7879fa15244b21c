/* Broadcasting binary ops: add and mul, b broadcast to a's shape.
 * ut_binary_b_strides(t): b's strides in a's 4-D frame (0 where b broadcasts). */
#include "cpu.h"
#include "../../ops/params.h"

/* a's shape padded to 4 dims */
static void shape4(const ut_tensor *t, int64_t *n) {
    int pad = 4 - t->ndim;
    for (int i = 0; i < 4; i++) n[i] = i < pad ? 1 : t->ne[i - pad];
}

#define BINARY_FWD(NAME, EXPR)                                                           \
    void ut_##NAME##_fwd_cpu(ut_tensor *t, UT_KCTX) {                                    \
        const float *A = ut_f32(t->src[0]), *B = ut_f32(t->src[1]);                      \
        float *O = ut_f32(t);                                                            \
        int64_t n[4];                                                                    \
        const int64_t *s = ut_binary_b_strides(t);                                       \
        shape4(t, n);                                                                    \
        if (ut_nelem(t->src[1]) == ut_nelem(t)) {                                        \
            int64_t N = ut_nelem(t);                                                     \
            _Pragma("omp parallel for schedule(static)") for (int64_t i = 0; i < N; i++) { \
                float x = A[i], y = B[i];                                                \
                O[i] = EXPR;                                                             \
            }                                                                            \
            return;                                                                      \
        }                                                                                \
        _Pragma("omp parallel for collapse(2) schedule(static)")                         \
        for (int64_t i0 = 0; i0 < n[0]; i0++)                                            \
            for (int64_t i1 = 0; i1 < n[1]; i1++)                                        \
                for (int64_t i2 = 0; i2 < n[2]; i2++) {                                  \
                    int64_t o = ((i0 * n[1] + i1) * n[2] + i2) * n[3];                   \
                    const float *bp = B + i0 * s[0] + i1 * s[1] + i2 * s[2];             \
                    for (int64_t i3 = 0; i3 < n[3]; i3++) {                              \
                        float x = A[o + i3], y = bp[i3 * s[3]];                          \
                        O[o + i3] = EXPR;                                                \
                    }                                                                    \
                }                                                                        \
    }

BINARY_FWD(add, x + y)
BINARY_FWD(mul, x * y)

/* db += reduce over broadcast positions of g * (other); other NULL means 1. */
static void reduce_into_b(float *db, const float *g, const float *other, const ut_tensor *t) {
    int64_t n[4];
    const int64_t *s = ut_binary_b_strides(t);
    shape4(t, n);
    if (ut_nelem(t->src[1]) == ut_nelem(t)) {
        int64_t N = ut_nelem(t);
#pragma omp parallel for schedule(static)
        for (int64_t i = 0; i < N; i++) db[i] += g[i] * (other ? other[i] : 1.0f);
        return;
    }
    for (int64_t i0 = 0; i0 < n[0]; i0++)
        for (int64_t i1 = 0; i1 < n[1]; i1++)
            for (int64_t i2 = 0; i2 < n[2]; i2++) {
                int64_t o = ((i0 * n[1] + i1) * n[2] + i2) * n[3];
                float *bp = db + i0 * s[0] + i1 * s[1] + i2 * s[2];
                for (int64_t i3 = 0; i3 < n[3]; i3++)
                    bp[i3 * s[3]] += g[o + i3] * (other ? other[o + i3] : 1.0f);
            }
}

/* A fresh gradient (backend.h, UT_KCAP_FRESH_GRAD; a and b then differ) is
 * written, 0 + t's gradient (the bits adding into zeros gives); a broadcast
 * b's is zeroed and summed into. */
/* a source whose gradient core made t's own (ut_kpassed) is left alone */
void ut_add_bwd_cpu(ut_tensor *t, UT_KCTX) {
    ut_tensor *a = t->src[0], *b = t->src[1];
    int64_t N = ut_nelem(t);
    if (a->requires_grad && !ut_kpassed(k, 0)) {
        bool acc = !ut_kfresh(k, 0);
#pragma omp parallel for schedule(static)
        for (int64_t i = 0; i < N; i++) a->grad[i] = (acc ? a->grad[i] : 0.0f) + t->grad[i];
    }
    if (b->requires_grad && !ut_kpassed(k, 1)) {
        if (ut_kfresh(k, 1) && ut_nelem(b) == N) {
#pragma omp parallel for schedule(static)
            for (int64_t i = 0; i < N; i++) b->grad[i] = 0.0f + t->grad[i];
        } else {
            ut_kzero_fresh(k, t, 2u, ut_cpu_memset);
            reduce_into_b(b->grad, t->grad, NULL, t);
        }
    }
}

void ut_mul_bwd_cpu(ut_tensor *t, UT_KCTX) {
    ut_tensor *a = t->src[0], *b = t->src[1];
    int64_t n[4];
    const int64_t *s = ut_binary_b_strides(t);
    shape4(t, n);
    if (a->requires_grad) { /* da = g * b (broadcast) */
        const float *B = ut_f32(b);
#pragma omp parallel for collapse(2) schedule(static)
        for (int64_t i0 = 0; i0 < n[0]; i0++)
            for (int64_t i1 = 0; i1 < n[1]; i1++)
                for (int64_t i2 = 0; i2 < n[2]; i2++) {
                    int64_t o = ((i0 * n[1] + i1) * n[2] + i2) * n[3];
                    const float *bp = B + i0 * s[0] + i1 * s[1] + i2 * s[2];
                    for (int64_t i3 = 0; i3 < n[3]; i3++)
                        a->grad[o + i3] += t->grad[o + i3] * bp[i3 * s[3]];
                }
    }
    if (b->requires_grad) reduce_into_b(b->grad, t->grad, ut_f32(a), t);
}
