/* Reductions to a scalar: sum and mean (double accumulation, fixed order). */
#include "cpu.h"

static double sum_of(const float *x, int64_t n) {
    double s = 0.0;
    for (int64_t i = 0; i < n; i++) s += x[i];
    return s;
}

void ut_sum_fwd_cpu(ut_tensor *t, UT_KCTX) {
    ut_f32(t)[0] = (float)sum_of(ut_f32(t->src[0]), ut_nelem(t->src[0]));
}

void ut_mean_fwd_cpu(ut_tensor *t, UT_KCTX) {
    int64_t n = ut_nelem(t->src[0]);
    ut_f32(t)[0] = n ? (float)(sum_of(ut_f32(t->src[0]), n) / n) : 0.0f;
}

static void spread(ut_tensor *t, float g) {
    ut_tensor *a = t->src[0];
    if (!a->requires_grad) return;
    int64_t n = ut_nelem(a);
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n; i++) a->grad[i] += g;
}

void ut_sum_bwd_cpu(ut_tensor *t, UT_KCTX) { spread(t, t->grad[0]); }
void ut_mean_bwd_cpu(ut_tensor *t, UT_KCTX) {
    int64_t n = ut_nelem(t->src[0]);
    spread(t, n ? t->grad[0] / (float)n : 0.0f);
}
