/* Exact GELU: out = x Phi(x), Phi(x) = 0.5 (1 + erf(x / sqrt(2))), and
 * gelu'(x) = Phi(x) + x phi(x), phi(x) = exp(-x^2 / 2) / sqrt(2 pi). fp32,
 * flat loops over the contiguous input. erf and exp are vmath.h's inline
 * versions, so the loops vectorise (glibc's erff is a call per element), and
 * the backward's erf reuses the exp of the normal density. */
#include <math.h>

#include "cpu.h"
#include "vmath.h"

#define GELU_RSQRT2 0.70710678118654752f
#define GELU_RSQRT_2PI 0.39894228040143268f

void ut_gelu_erf_forward_cpu(float *out, const float *inp, int64_t N) {
#pragma omp parallel for simd schedule(static)
    for (int64_t i = 0; i < N; i++) out[i] = 0.5f * inp[i] * (1.0f + ut_erff_fast(inp[i] * GELU_RSQRT2));
}

/* dinp (N) += dout * gelu'(inp) */
void ut_gelu_erf_backward_cpu(float *dinp, const float *dout, const float *inp, int64_t N) {
#pragma omp parallel for simd schedule(static)
    for (int64_t i = 0; i < N; i++) {
        float x = inp[i], z = x * GELU_RSQRT2;
        float e = ut_expf_fast(-z * z); /* exp(-x^2 / 2) */
        float cdf = 0.5f * (1.0f + ut_erff_fast_e(z, e));
        dinp[i] += dout[i] * (cdf + x * GELU_RSQRT_2PI * e);
    }
}

void ut_gelu_erf_fwd_cpu(ut_tensor *t, UT_KCTX) {
    ut_gelu_erf_forward_cpu(ut_f32(t), ut_f32(t->src[0]), ut_nelem(t));
}

void ut_gelu_erf_bwd_cpu(ut_tensor *t, UT_KCTX) {
    ut_tensor *a = t->src[0];
    if (a->requires_grad) ut_gelu_erf_backward_cpu(a->grad, t->grad, ut_f32(a), ut_nelem(t));
}
