/* The tanh-form GELU's device arithmetic, shared by the elementwise gelu
 * kernels (unary.cu) and linear's fused GELU backward with its bias
 * gradient (flat.cu): the CPU's operations in the CPU's order (see
 * src/backend/cpu/unary.c and vmath.h), with explicit round-to-nearest
 * intrinsics so that nvcc fuses no multiply-add the CPU does not; the same
 * bits as the CPU.
 * defines: utk::exp_poly, utk::gelu_s, utk::GeluF, utk::GeluB, utk::kGeluK0, utk::kGeluK1 */
#ifndef UTRAIN_CUDA_GELU_CUH
#define UTRAIN_CUDA_GELU_CUH

#include <stdint.h>

namespace utk {

/* ---- the CPU's vmath.h functions, same operations in the same order ---- */

/* e^x within 2 ulp: x = n ln2 + r, e^r by a degree-5 polynomial, 2^n as two
 * power-of-two factors (see ut_expf_fast in src/backend/cpu/vmath.h) */
__device__ __forceinline__ float exp_poly(float x) {
    x = x > 89.0f ? 89.0f : x;
    x = x < -104.0f ? -104.0f : x;
    const float shift = 12582912.0f;
    float t = __fmaf_rn(x, 1.44269504088896341f, shift);
    float n = __fsub_rn(t, shift);
    int32_t ni = (int32_t)(__float_as_uint(t) - __float_as_uint(shift));
    float r = __fmaf_rn(n, -0.693359375f, x);
    r = __fmaf_rn(n, 2.12194440e-4f, r);
    float p = 1.9875691500e-4f;
    p = __fmaf_rn(p, r, 1.3981999507e-3f);
    p = __fmaf_rn(p, r, 8.3334519073e-3f);
    p = __fmaf_rn(p, r, 4.1665795894e-2f);
    p = __fmaf_rn(p, r, 1.6666665459e-1f);
    p = __fmaf_rn(p, r, 5.0000001201e-1f);
    float er = __fadd_rn(__fmaf_rn(p, __fmul_rn(r, r), r), 1.0f);
    int32_t n1 = ni / 2, n2 = ni - n1;
    float s1 = __uint_as_float((uint32_t)(n1 + 127) << 23);
    float s2 = __uint_as_float((uint32_t)(n2 + 127) << 23);
    return __fmul_rn(__fmul_rn(er, s1), s2);
}

constexpr float kGeluK0 = 0.7978845608028654f; /* sqrt(2 / pi) */
constexpr float kGeluK1 = 0.044715f;

/* gelu, tanh form, as sigmoid(2u) = 0.5 (1 + tanh u), u = k0 (x + k1 x^3) */
__device__ __forceinline__ float gelu_s(float x, float x2) {
    float u = __fadd_rn(x, __fmul_rn(__fmul_rn(kGeluK1, x2), x));
    return __fdiv_rn(1.0f, __fadd_rn(1.0f, exp_poly(__fmul_rn(-2.0f * kGeluK0, u))));
}
struct GeluF { /* x s */
    __device__ float operator()(float x) const { return __fmul_rn(x, gelu_s(x, __fmul_rn(x, x))); }
};
struct GeluB { /* dy (s + 2 x s (1 - s) u'(x)), u'(x) = k0 (1 + 3 k1 x^2) */
    __device__ float operator()(float dy, float x) const {
        float x2 = __fmul_rn(x, x), s = gelu_s(x, x2);
        float du = __fmul_rn(kGeluK0, __fadd_rn(1.0f, __fmul_rn(3.0f * kGeluK1, x2)));
        float w = __fmul_rn(__fmul_rn(__fmul_rn(__fmul_rn(2.0f, x), s), __fsub_rn(1.0f, s)), du);
        return __fmul_rn(dy, __fadd_rn(s, w));
    }
};

} // namespace utk

#endif
