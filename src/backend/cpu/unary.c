/* Elementwise unary ops: scale, relu, gelu (tanh approximation), tanh,
 * sigmoid, dropout, uniform noise. Inputs are made contiguous in the
 * constructor, so every kernel is a flat loop over N elements. Backward
 * formulas follow PyTorch's (relu masks on x > 0; tanh and sigmoid use the
 * saved output). Each backward adds into its input's gradient, or with acc
 * false (a gradient no op has written yet: backend.h, UT_KCAP_FRESH_GRAD)
 * writes 0 + the term without reading it, the bits adding into zeros
 * gives. */
#include <math.h>

#include "vmath.h"
#include "cpu.h"
#include "../../ops/params.h"

/* ---- scale: out = s * inp ---- */
void ut_scale_forward_cpu(float *out, const float *inp, float s, int64_t N) {
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < N; i++) out[i] = s * inp[i];
}

/* dinp (N) += s * dout (N) */
void ut_scale_backward_cpu(float *dinp, const float *dout, float s, int64_t N, bool acc) {
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < N; i++) dinp[i] = (acc ? dinp[i] : 0.0f) + s * dout[i];
}

void ut_scale_fwd_cpu(ut_tensor *t, UT_KCTX) {
    ut_scale_forward_cpu(ut_f32(t), ut_f32(t->src[0]), ut_scale_s(t), ut_nelem(t));
}

void ut_scale_bwd_cpu(ut_tensor *t, UT_KCTX) {
    ut_tensor *a = t->src[0];
    if (a->requires_grad) ut_scale_backward_cpu(a->grad, t->grad, ut_scale_s(t), ut_nelem(t), !ut_kfresh(k, 0));
}

/* ---- relu: out = max(inp, 0) ---- */
void ut_relu_forward_cpu(float *out, const float *inp, int64_t N) {
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < N; i++) out[i] = inp[i] > 0.0f ? inp[i] : 0.0f;
}

/* dinp (N) += dout where inp > 0 (the gradient at 0 is 0, as in PyTorch) */
void ut_relu_backward_cpu(float *dinp, const float *dout, const float *inp, int64_t N, bool acc) {
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < N; i++) dinp[i] = (acc ? dinp[i] : 0.0f) + (inp[i] > 0.0f ? dout[i] : 0.0f);
}

void ut_relu_fwd_cpu(ut_tensor *t, UT_KCTX) { ut_relu_forward_cpu(ut_f32(t), ut_f32(t->src[0]), ut_nelem(t)); }

void ut_relu_bwd_cpu(ut_tensor *t, UT_KCTX) {
    ut_tensor *a = t->src[0];
    if (a->requires_grad) ut_relu_backward_cpu(a->grad, t->grad, ut_f32(a), ut_nelem(t), !ut_kfresh(k, 0));
}

/* ---- gelu, tanh approximation (PyTorch gelu(approximate='tanh')):
 * out = 0.5 x (1 + tanh(u)), u = k0 (x + k1 x^3), k0 = sqrt(2/pi), k1 = 0.044715.
 * Computed through the identity 0.5 (1 + tanh(u)) = sigmoid(2u) = s, so
 * out = x s: one exp instead of tanhf (several times slower), and no
 * cancellation in 1 + tanh(u) for negative x. The exp is ut_expf_fast, inline
 * and vectorisable (glibc's expf is a call per element). ---- */
#define GELU_K0 0.7978845608028654f
#define GELU_K1 0.044715f

/* s = sigmoid(2u); exp overflows to inf for very negative x, giving s = 0 */
static inline float gelu_s(float x, float x2) {
    return 1.0f / (1.0f + ut_expf_fast(-2.0f * GELU_K0 * (x + GELU_K1 * x2 * x)));
}

void ut_gelu_forward_cpu(float *out, const float *inp, int64_t N) {
#pragma omp parallel for simd schedule(static)
    for (int64_t i = 0; i < N; i++) {
        float x = inp[i];
        out[i] = x * gelu_s(x, x * x);
    }
}

/* dinp (N) += dout * gelu'(inp) (acc false: dinp holds nothing yet, and
 * 0 + that is written). With th = tanh(u) = 2s - 1,
 * gelu'(x) = 0.5 (1 + th) + 0.5 x (1 - th^2) u'(x) = s + 2 x s (1 - s) u'(x),
 * u'(x) = k0 (1 + 3 k1 x^2). */
void ut_gelu_backward_cpu(float *dinp, const float *dout, const float *inp, int64_t N, bool acc) {
#pragma omp parallel for simd schedule(static)
    for (int64_t i = 0; i < N; i++) {
        float x = inp[i], x2 = x * x, s = gelu_s(x, x2);
        float du = GELU_K0 * (1.0f + 3.0f * GELU_K1 * x2);
        dinp[i] = (acc ? dinp[i] : 0.0f) + dout[i] * (s + 2.0f * x * s * (1.0f - s) * du);
    }
}

void ut_gelu_fwd_cpu(ut_tensor *t, UT_KCTX) { ut_gelu_forward_cpu(ut_f32(t), ut_f32(t->src[0]), ut_nelem(t)); }

void ut_gelu_bwd_cpu(ut_tensor *t, UT_KCTX) {
    ut_tensor *a = t->src[0];
    if (a->requires_grad) ut_gelu_backward_cpu(a->grad, t->grad, ut_f32(a), ut_nelem(t), !ut_kfresh(k, 0));
}

/* ---- tanh ---- */
void ut_tanh_forward_cpu(float *out, const float *inp, int64_t N) {
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < N; i++) out[i] = tanhf(inp[i]);
}

/* dinp (N) += dout * (1 - out^2), out the forward result */
void ut_tanh_backward_cpu(float *dinp, const float *dout, const float *out, int64_t N, bool acc) {
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < N; i++) dinp[i] = (acc ? dinp[i] : 0.0f) + dout[i] * (1.0f - out[i] * out[i]);
}

void ut_tanh_fwd_cpu(ut_tensor *t, UT_KCTX) { ut_tanh_forward_cpu(ut_f32(t), ut_f32(t->src[0]), ut_nelem(t)); }

void ut_tanh_bwd_cpu(ut_tensor *t, UT_KCTX) {
    ut_tensor *a = t->src[0];
    if (a->requires_grad) ut_tanh_backward_cpu(a->grad, t->grad, ut_f32(t), ut_nelem(t), !ut_kfresh(k, 0));
}

/* ---- sigmoid: out = 1 / (1 + exp(-inp)); exp overflows to inf for very
 * negative inputs, which gives the correct limit 0 ---- */
void ut_sigmoid_forward_cpu(float *out, const float *inp, int64_t N) {
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < N; i++) out[i] = 1.0f / (1.0f + expf(-inp[i]));
}

/* dinp (N) += dout * out (1 - out), out the forward result */
void ut_sigmoid_backward_cpu(float *dinp, const float *dout, const float *out, int64_t N, bool acc) {
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < N; i++) dinp[i] = (acc ? dinp[i] : 0.0f) + dout[i] * out[i] * (1.0f - out[i]);
}

void ut_sigmoid_fwd_cpu(ut_tensor *t, UT_KCTX) {
    ut_sigmoid_forward_cpu(ut_f32(t), ut_f32(t->src[0]), ut_nelem(t));
}

void ut_sigmoid_bwd_cpu(ut_tensor *t, UT_KCTX) {
    ut_tensor *a = t->src[0];
    if (a->requires_grad) ut_sigmoid_backward_cpu(a->grad, t->grad, ut_f32(t), ut_nelem(t), !ut_kfresh(k, 0));
}

/* ---- dropout (inverted): parameters p and keep_scale = 1/(1-p); saved: ut_dropout_keep
 * (uint8, N: 1 where an element survives), drawn in the forward kernel from
 * the launch's generator (ut_dropout_keep_mask: the context's Philox stream,
 * the same whatever the thread count) so that a checkpoint recompute, which
 * restores the RNG state, draws the same mask ---- */

/* out (N) = inp * mask * scale */
void ut_dropout_forward_cpu(float *out, const float *inp, const uint8_t *mask, float scale,
                            int64_t N) {
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < N; i++) out[i] = mask[i] ? inp[i] * scale : 0.0f;
}

/* dinp (N) += dout * mask * scale */
void ut_dropout_backward_cpu(float *dinp, const float *dout, const uint8_t *mask, float scale,
                             int64_t N, bool acc) {
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < N; i++) dinp[i] = (acc ? dinp[i] : 0.0f) + (mask[i] ? dout[i] * scale : 0.0f);
}

void ut_dropout_fwd_cpu(ut_tensor *t, UT_KCTX) {
    int64_t N = ut_nelem(t);
    uint8_t *mask = ut_kalloc(k, (size_t)N);
    ut_dropout_keep_mask(t, &k->rng, mask, N);
    ut_dropout_set_keep(t, mask);
    ut_dropout_forward_cpu(ut_f32(t), ut_f32(t->src[0]), mask, ut_dropout_keep_scale(t), N);
}

void ut_dropout_bwd_cpu(ut_tensor *t, UT_KCTX) {
    ut_tensor *a = t->src[0];
    if (a->requires_grad)
        ut_dropout_backward_cpu(a->grad, t->grad, ut_dropout_keep(t), ut_dropout_keep_scale(t), ut_nelem(t),
                                !ut_kfresh(k, 0));
}

/* ---- uniform noise: out = x + mag * (2u - 1), u the launch's draws as
 * uniforms (ut_philox_uniforms: element i takes draw offset + i, as
 * dropout's whole-tensor mask); 2u - 1 is exact, so the noise is one
 * rounded product and the sum one more rounding, the bits the CUDA kernel
 * gives. Backward passes the gradient through. ---- */
void ut_uniform_noise_fwd_cpu(ut_tensor *t, UT_KCTX) {
    int64_t N = ut_nelem(t);
    float *out = ut_f32(t);
    const float *x = ut_f32(t->src[0]);
    const float mag = ut_uniform_noise_mag(t);
    ut_philox_uniforms(&k->rng, out, N);
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < N; i++) {
        float noise = mag * (2.0f * out[i] - 1.0f);
        out[i] = x[i] + noise;
    }
}

void ut_uniform_noise_bwd_cpu(ut_tensor *t, UT_KCTX) {
    ut_tensor *a = t->src[0];
    if (!a->requires_grad) return;
    int64_t N = ut_nelem(t);
    float *da = a->grad;
    const float *g = t->grad;
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < N; i++) da[i] += g[i];
}
