/* Inline, vectorisable float math for the CPU kernels.
 * defines: ut_bits_to_float, ut_float_to_bits, ut_expf_fast, ut_erff_fast_e, ut_erff_fast.
 *
 * glibc's expf is an out-of-line call per element (its vector variant is only
 * used under -ffast-math), which stops loops from vectorising. These functions
 * use only +, *, fmaf and bit operations, so in a `#pragma omp simd` loop the
 * compiler turns them into vector code, and the vector and scalar paths give
 * the same bits (results do not depend on how a loop is split among threads). */
#ifndef UTRAIN_CPU_VMATH_H
#define UTRAIN_CPU_VMATH_H

#include <math.h>
#include <stdint.h>
#include <string.h>

static inline float ut_bits_to_float(uint32_t u) {
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

static inline uint32_t ut_float_to_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

/* e^x for every float x, within 2 ulp of the exact value (tests/unit/test_vmath.c
 * sweeps the whole range and records the maximum): +inf exactly where expf
 * overflows (x > 88.7228317), correctly scaled subnormals down to x = -103.97,
 * 0 below, e^-inf = 0, e^+inf = +inf, NaN for NaN.
 *
 * x = n ln2 + r with n = round(x / ln2) and |r| <= ln2/2 (Cody-Waite: ln2 in
 * two parts, so r is exact to float precision); e^r = 1 + r + r^2 P(r) with
 * Cephes' degree-5 minimax P; e^x = e^r 2^n, with 2^n applied as two
 * power-of-two factors 2^(n/2) 2^(n-n/2) so that n = 128 (x just below the
 * overflow threshold) and n down to -150 (subnormal results, rounded once by
 * the last multiplication) need no special case. */
static inline float ut_expf_fast(float x) {
    /* Beyond these bounds the result is already inf / 0 (or NaN, which the
     * comparisons leave alone), and n stays inside [-150, 129]. */
    x = x > 89.0f ? 89.0f : x;
    x = x < -104.0f ? -104.0f : x;
    /* n = round-to-nearest(x log2 e), read from the low mantissa bits of
     * t = x log2 e + 1.5 2^23 (exact for |n| < 2^22; no float-to-int conversion,
     * which would be undefined for NaN). */
    const float shift = 12582912.0f;
    float t = fmaf(x, 1.44269504088896341f, shift);
    float n = t - shift;
    int32_t ni = (int32_t)(ut_float_to_bits(t) - ut_float_to_bits(shift));
    float r = fmaf(n, -0.693359375f, x);
    r = fmaf(n, 2.12194440e-4f, r);
    float p = 1.9875691500e-4f;
    p = fmaf(p, r, 1.3981999507e-3f);
    p = fmaf(p, r, 8.3334519073e-3f);
    p = fmaf(p, r, 4.1665795894e-2f);
    p = fmaf(p, r, 1.6666665459e-1f);
    p = fmaf(p, r, 5.0000001201e-1f);
    float er = fmaf(p, r * r, r) + 1.0f;
    int32_t n1 = ni / 2, n2 = ni - n1;
    float s1 = ut_bits_to_float((uint32_t)(n1 + 127) << 23);
    float s2 = ut_bits_to_float((uint32_t)(n2 + 127) << 23);
    return er * s1 * s2;
}

/* erf(z) for every float z, given e = e^(-z^2) (ut_expf_fast(-z * z); the
 * exact GELU's backward has it already for the normal density): within 4 ulp
 * of the exact value, 1.5e-7 absolute (tests/unit/test_vmath.c), +-1 for
 * |z| >= 4, +-1 at +-inf, NaN for NaN.
 *
 * Two least-squares fits against erf/erfc in double (our own, on Chebyshev
 * nodes), both evaluated and one selected, so that a `#pragma omp simd` loop
 * needs no branch:
 *   |z| < 1:  erf(z) = z P(z^2), P of degree 6 (fit error 1.3e-9);
 *   |z| >= 1: erf(z) = 1 - e^(-z^2) R(t), t = 1 / (1 + |z|), R of degree 8
 *             fitted to erfc(z) e^(z^2) on [1, 4] (relative error 5e-10);
 *             beyond 4 the product is below half a float spacing of 1. */
static inline float ut_erff_fast_e(float z, float e) {
    float a = fabsf(z), s = a * a;
    float p = 7.933422441e-05f;
    p = fmaf(p, s, -8.034827988e-04f);
    p = fmaf(p, s, 5.191216608e-03f);
    p = fmaf(p, s, -2.685539872e-02f);
    p = fmaf(p, s, 1.128362571e-01f);
    p = fmaf(p, s, -3.761262988e-01f);
    p = fmaf(p, s, 1.128379167e+00f);
    float t = 1.0f / (1.0f + a);
    float r = 1.032603026e+00f;
    r = fmaf(r, t, -3.492248214e+00f);
    r = fmaf(r, t, 4.792138032e+00f);
    r = fmaf(r, t, -2.991974411e+00f);
    r = fmaf(r, t, 3.648416537e-01f);
    r = fmaf(r, t, 1.644386198e-01f);
    r = fmaf(r, t, 5.776960734e-01f);
    r = fmaf(r, t, 5.632953435e-01f);
    r = fmaf(r, t, 2.608263824e-05f);
    /* the select as bit operations: GCC does not if-convert a ?: of two float
     * expressions (either could trap), and the loop would stay scalar */
    uint32_t near0 = -(uint32_t)(a < 1.0f);
    uint32_t y = (ut_float_to_bits(a * p) & near0) | (ut_float_to_bits(fmaf(-e, r, 1.0f)) & ~near0);
    return copysignf(ut_bits_to_float(y), z);
}

static inline float ut_erff_fast(float z) { return ut_erff_fast_e(z, ut_expf_fast(-z * z)); }

#endif
