/* ut_expf_fast (src/backend/cpu/vmath.h) against exp in double over a sweep of
 * every float range, its edge cases (overflow threshold, subnormals, inf, NaN)
 * and the equality of its vector and scalar code paths; ut_erff_fast the same
 * way against erf in double. */
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../src/backend/cpu/vmath.h"
#include "test.h"

/* Error of y in units of the float spacing at the exact value e^x (subnormal
 * spacing 2^-149 below FLT_MIN). Both overflowing counts as exact. */
static double ulp_error(float y, float x) {
    /* Outside [-110, 89] the exact value is < 2^-158 (rounds to 0) or above
     * FLT_MAX; exp in double would take its slow underflow/overflow paths. */
    if (x < -110.0f) return fabs((double)y) / 0x1p-149;
    double ref = x > 89.0f ? INFINITY : exp((double)x);
    if (ref > FLT_MAX) return isinf(y) && y > 0 ? 0.0 : INFINITY;
    int e;
    frexp(ref, &e); /* ref = m 2^e, m in [0.5, 1): float spacing 2^(e-24) */
    double ulp = ldexp(1.0, e - 24 < -149 ? -149 : e - 24);
    return fabs((double)y - ref) / ulp;
}

/* A call the compiler cannot vectorise or constant-fold: the scalar path. */
static __attribute__((noinline)) float scalar_exp(float x) { return ut_expf_fast(x); }

/* The vectorised path. Out of line, so that the compiler clears the upper
 * vector state (vzeroupper) on return: the sweep below calls glibc's SSE
 * functions, which run ~10x slower after AVX-512 code that leaves it dirty. */
static __attribute__((noinline)) void vector_exp(float *y, const float *x, int n) {
#pragma omp simd
    for (int i = 0; i < n; i++) y[i] = ut_expf_fast(x[i]);
}

static float bits(uint32_t u) { return ut_bits_to_float(u); }

#define CHUNK 4096

/* Every stride-th float bit pattern (both signs, NaNs skipped), through the
 * vectorised loop; compares bits with the scalar path and records the worst
 * ulp error of ut_expf_fast and, for comparison, of glibc's expf. */
static void test_sweep(void) {
    const uint32_t stride = test_quick() ? 4099 : 251;
    static float xs[CHUNK], ys[CHUNK];
    double worst = 0.0, worst_libm = 0.0;
    float worst_x = 0.0f;
    long n = 0, mismatched = 0;
    uint64_t u = 0;
    while (u <= UINT32_MAX) {
        int k = 0;
        for (; k < CHUNK && u <= UINT32_MAX; u += stride) {
            float x = bits((uint32_t)u);
            if (!isnan(x)) xs[k++] = x;
        }
        vector_exp(ys, xs, k);
        for (int i = 0; i < k; i++) {
            float s = scalar_exp(xs[i]);
            mismatched += memcmp(&s, &ys[i], sizeof s) != 0;
            double e = ulp_error(ys[i], xs[i]);
            double el = fabsf(xs[i]) < 110.0f ? ulp_error(expf(xs[i]), xs[i]) : 0.0;
            if (e > worst) {
                worst = e;
                worst_x = xs[i];
            }
            if (el > worst_libm) worst_libm = el;
        }
        n += k;
    }
    printf("     %ld inputs: max error %.3f ulp (at x = %.9g), glibc expf %.3f ulp\n", n, worst,
           (double)worst_x, worst_libm);
    CHECK(worst <= 2.0, "max error %.3f ulp at x = %.9g", worst, (double)worst_x);
    CHECK(mismatched == 0, "%ld inputs where the vector and scalar paths differ", mismatched);
}

/* The range softmax and gelu use most, [-1, 1] (every 701st float of each
 * sign), and the approach to overflow, [80, 88.75] (every float). */
static void test_dense_ranges(void) {
    const uint32_t lo[] = {0, ut_float_to_bits(80.0f)};
    const uint32_t hi[] = {ut_float_to_bits(1.0f), ut_float_to_bits(88.75f)};
    const uint32_t stride[] = {test_quick() ? 70001 : 701, test_quick() ? 101 : 1};
    double worst = 0.0;
    long n = 0;
    for (int r = 0; r < 2; r++)
        for (uint32_t u = lo[r]; u <= hi[r]; u += stride[r], n += 2) {
            float x = bits(u);
            double e = fmax(ulp_error(ut_expf_fast(x), x), ulp_error(ut_expf_fast(-x), -x));
            worst = e > worst ? e : worst;
        }
    printf("     %ld inputs: max error %.3f ulp\n", n, worst);
    CHECK(worst <= 2.0, "max error %.3f ulp", worst);
}

static void test_edges(void) {
    const float last_finite = bits(0x42b17217u); /* 88.7228317: largest x with finite expf */
    CHECK(isfinite(expf(last_finite)) && isinf(expf(nextafterf(last_finite, INFINITY))),
          "threshold assumption about expf");
    float y = ut_expf_fast(last_finite);
    CHECK(isfinite(y) && ulp_error(y, last_finite) <= 2.0, "e^%.9g = %.9g", (double)last_finite,
          (double)y);
    CHECK(isinf(ut_expf_fast(nextafterf(last_finite, INFINITY))), "no overflow above threshold");
    CHECK(isinf(ut_expf_fast(100.0f)) && isinf(ut_expf_fast(FLT_MAX)) &&
              isinf(ut_expf_fast(INFINITY)),
          "large x must give +inf");
    CHECK(ut_expf_fast(-INFINITY) == 0.0f && ut_expf_fast(-FLT_MAX) == 0.0f &&
              ut_expf_fast(-1000.0f) == 0.0f && ut_expf_fast(-104.0f) == 0.0f,
          "very negative x must give 0");
    /* subnormal results: e^-100 = 3.7e-44, e^-103.9 = min subnormal 1.4e-45 */
    const float sub[] = {-87.5f, -90.0f, -100.0f, -103.9f};
    for (int i = 0; i < 4; i++) {
        float s = ut_expf_fast(sub[i]);
        CHECK(s > 0.0f && s < FLT_MIN && ulp_error(s, sub[i]) <= 1.0, "e^%g = %g, expf %g",
              (double)sub[i], (double)s, (double)expf(sub[i]));
    }
    CHECK(ut_expf_fast(0.0f) == 1.0f && ut_expf_fast(-0.0f) == 1.0f, "e^0 = %.9g",
          (double)ut_expf_fast(0.0f));
    CHECK(isnan(ut_expf_fast(NAN)) && isnan(scalar_exp(-NAN)), "NaN must stay NaN");
}

/* ---- erf ---- */
static __attribute__((noinline)) float scalar_erf(float x) { return ut_erff_fast(x); }

static __attribute__((noinline)) void vector_erf(float *y, const float *x, int n) {
#pragma omp simd
    for (int i = 0; i < n; i++) y[i] = ut_erff_fast(x[i]);
}

/* error of y in units of the float spacing at erf(x) (at least FLT_MIN's) */
static double erf_ulp_error(float y, float x) {
    double ref = erf((double)x);
    int e;
    frexp(ref, &e);
    double ulp = ldexp(1.0, e - 24 < -149 ? -149 : e - 24);
    return fabs((double)y - ref) / ulp;
}

/* Every float in [-6, 6] at a stride (both signs; beyond, erf is +-1 in
 * float): the worst ulp and absolute errors, vector against scalar bits, and
 * glibc's erff's worst ulp error for comparison. */
static void test_erf_sweep(void) {
    const uint32_t stride = test_quick() ? 997 : 149, hi = ut_float_to_bits(6.0f);
    static float xs[CHUNK], ys[CHUNK];
    double worst = 0.0, worst_abs = 0.0, worst_libm = 0.0;
    float worst_x = 0.0f;
    long n = 0, mismatched = 0;
    for (uint32_t u = 0; u <= hi;) {
        int k = 0;
        for (; k < CHUNK && u <= hi; u += stride, k += 2) xs[k] = bits(u), xs[k + 1] = -bits(u);
        vector_erf(ys, xs, k);
        for (int i = 0; i < k; i++) {
            float s = scalar_erf(xs[i]);
            mismatched += memcmp(&s, &ys[i], sizeof s) != 0;
            double e = erf_ulp_error(ys[i], xs[i]), ea = fabs((double)ys[i] - erf((double)xs[i]));
            if (e > worst) worst = e, worst_x = xs[i];
            worst_abs = ea > worst_abs ? ea : worst_abs;
            double el = erf_ulp_error(erff(xs[i]), xs[i]);
            worst_libm = el > worst_libm ? el : worst_libm;
        }
        n += k;
    }
    printf("     %ld inputs: max error %.3f ulp (at x = %.9g), %.3g absolute; glibc erff %.3f ulp\n", n,
           worst, (double)worst_x, worst_abs, worst_libm);
    CHECK(worst <= 4.0, "max error %.3f ulp at x = %.9g", worst, (double)worst_x);
    CHECK(worst_abs <= 1.6e-7, "max absolute error %.3g", worst_abs);
    CHECK(mismatched == 0, "%ld inputs where the vector and scalar paths differ", mismatched);
}

static void test_erf_edges(void) {
    CHECK(ut_erff_fast(0.0f) == 0.0f && signbit(ut_erff_fast(-0.0f)), "erf(+-0) = +-0");
    CHECK(ut_erff_fast(4.0f) == 1.0f && ut_erff_fast(-7.5f) == -1.0f && ut_erff_fast(FLT_MAX) == 1.0f,
          "erf saturates at +-1");
    CHECK(ut_erff_fast(INFINITY) == 1.0f && ut_erff_fast(-INFINITY) == -1.0f, "erf(+-inf) = +-1");
    CHECK(isnan(ut_erff_fast(NAN)) && isnan(scalar_erf(-NAN)), "NaN must stay NaN");
    /* tiny arguments: erf(x) = 2x/sqrt(pi) to float precision */
    CHECK(erf_ulp_error(ut_erff_fast(1e-20f), 1e-20f) <= 1.0 && erf_ulp_error(ut_erff_fast(1e-3f), 1e-3f) <= 1.0,
          "small x: %.9g", (double)ut_erff_fast(1e-3f));
}

int main(void) {
    RUN(test_sweep);
    RUN(test_dense_ranges);
    RUN(test_edges);
    RUN(test_erf_sweep);
    RUN(test_erf_edges);
    return TEST_SUMMARY();
}
