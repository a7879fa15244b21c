/* The CUDA backend's matrix products (src/backend/cuda/gemm.cu: cuda.h's
 * ut_cuda_sgemm, ut_cuda_gemm16, ut_cuda_gemm16_out) called directly, on a
 * GPU or on the CUDA emulator's cuBLASLt (tests/emu/cublas_emu.cpp), with
 * every layout the ops hand them: the four transposes, padded rows, strided
 * and shared batches, heads side by side in one output (attention's
 * layout), an empty inner dimension, and operands one element off their
 * allocation's alignment (a head's columns, a parameter inside the flat
 * buffer).
 *
 * The values are multiples of 1/32 up to 1.5 in magnitude, so every product
 * and partial sum is exact in float32 and in TF32 and the 16-bit types
 * hold the operands: a float32 result must equal the double-precision
 * reference to the bit whatever order the library sums in, and a 16-bit
 * result must be that value rounded once to nearest even. C is NaN where
 * beta is 0, which must not be read.
 *
 * gemm.cu reads its switches once, so each mode runs in a child process:
 * cuBLASLt (the default), UT_CUDA_GEMM=cublas (cuBLAS's classic SGEMM) and
 * UT_CUDA_LT_FUSED=0 (16-bit outputs left to the caller, which the test
 * checks queued nothing), and on the emulator UT_EMU_LT_STRICT_BIAS=1 (a
 * cuBLASLt without the fused kernel for a float32 bias: the heuristic's
 * refusal is an answer, not an error). Skips, saying why, without a GPU. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../../src/backend/backend.h"
#include "test.h"
/* the products' declarations (cuda.h includes core's internal.h; the host views come from test.h) */
#define UT_HOST_VIEWS_PUBLIC
#include "../../src/backend/cuda/cuda.h"

static const ut_backend *be;
static char skip_why[256];

static uint32_t rng = 12345u;
/* a multiple of 1/32 in [-1.5, 1.5] */
static float value(void) {
    rng = rng * 1664525u + 1013904223u;
    return (float)((int)(rng >> 16) % 97 - 48) / 32.0f;
}

/* element (r, c) of op(X), X stored row-major with row stride ld */
static int64_t at(bool trans, int64_t r, int64_t c, int64_t ld) { return trans ? c * ld + r : r * ld + c; }

/* the reference: C[b] = alpha op(A[b]) op(B[b]) + beta C[b] (+ bias[col]) in double, into want */
static void reference(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const float *A, int64_t lda,
                      int64_t sA, const float *B, int64_t ldb, int64_t sB, float beta, const float *C, float *want,
                      int64_t ldc, int64_t sC, int64_t batch, const float *bias) {
    for (int64_t b = 0; b < batch; b++)
        for (int64_t i = 0; i < m; i++)
            for (int64_t j = 0; j < n; j++) {
                double s = 0;
                for (int64_t p = 0; p < k; p++)
                    s += (double)A[b * sA + at(ta, i, p, lda)] * (double)B[b * sB + at(tb, p, j, ldb)];
                int64_t o = b * sC + i * ldc + j;
                double v = alpha * s + (beta != 0.0f ? beta * (double)C[o] : 0.0) + (bias ? bias[j] : 0.0);
                want[o] = (float)v;
            }
}

static float *host_values(int64_t n) {
    float *x = malloc((size_t)n * sizeof(float));
    for (int64_t i = 0; i < n; i++) x[i] = value();
    return x;
}

/* device copy of n floats at element offset off of a fresh allocation (so off 1 is 4 bytes off its alignment) */
static float *upload(const float *x, int64_t n, int off, void **base) {
    *base = be->alloc((size_t)(n + off) * sizeof(float));
    float *d = (float *)*base + off;
    be->copy(d, x, (size_t)n * sizeof(float), UT_COPY_H2D);
    return d;
}

/* the same values in dt (16 bits) at element offset off (2 bytes each) */
static void *upload16(const float *x, int64_t n, ut_dtype dt, int off, void **base) {
    void *f;
    float *d = upload(x, n, 0, &f);
    *base = be->alloc((size_t)(n + off) * 2);
    void *h = (char *)*base + 2 * off;
    be->convert(h, dt, d, UT_F32, n);
    be->free(f);
    return h;
}

static void download16(float *dst, const void *src, int64_t n, ut_dtype dt) {
    float *w = be->alloc((size_t)n * sizeof(float));
    be->convert(w, UT_F32, src, dt, n);
    be->copy(dst, w, (size_t)n * sizeof(float), UT_COPY_D2H);
    be->free(w);
}

static int64_t mismatches(const float *got, const float *want, int64_t n, int64_t *first) {
    int64_t bad = 0;
    for (int64_t i = 0; i < n; i++)
        if (memcmp(&got[i], &want[i], sizeof(float)) != 0 && !bad++) *first = i;
    return bad;
}

/* One float32 product through ut_cuda_sgemm against the reference, to the bit. */
static void check_sgemm(const char *what, bool ta, bool tb, int64_t m, int64_t n, int64_t k, int64_t pad,
                        int64_t batch, bool shared_a, bool side_by_side, float alpha, float beta, int off) {
    int64_t lda = (ta ? m : k) + pad, ldb = (tb ? k : n) + pad;
    int64_t arows = ta ? k : m, brows = tb ? n : k;
    int64_t sA = shared_a ? 0 : arows * lda, sB = brows * ldb;
    /* side by side: entry b's columns [b n, b n + n) of one m x (batch n) matrix */
    int64_t ldc = side_by_side ? batch * n + pad : n + pad, sC = side_by_side ? n : m * ldc;
    int64_t na = (shared_a ? 1 : batch) * arows * lda, nb = batch * sB, nc = side_by_side ? m * ldc : batch * sC;
    float *A = host_values(na), *B = host_values(nb), *C = host_values(nc), *want = malloc((size_t)nc * sizeof(float));
    if (beta == 0.0f)
        for (int64_t i = 0; i < nc; i++) C[i] = NAN;
    memcpy(want, C, (size_t)nc * sizeof(float));
    reference(ta, tb, m, n, k, alpha, A, lda, sA, B, ldb, sB, beta, C, want, ldc, sC, batch, NULL);
    void *ba, *bb, *bc;
    float *dA = upload(A, na, off, &ba), *dB = upload(B, nb, off, &bb), *dC = upload(C, nc, off, &bc);
    ut_cuda_sgemm(ta, tb, m, n, k, alpha, dA, lda, sA, dB, ldb, sB, beta, dC, ldc, sC, batch);
    float *got = malloc((size_t)nc * sizeof(float));
    be->copy(got, dC, (size_t)nc * sizeof(float), UT_COPY_D2H);
    int64_t first = 0, bad = mismatches(got, want, nc, &first);
    CHECK(bad == 0, "%s (%s%s m %lld n %lld k %lld batch %lld): %lld of %lld differ, first [%lld] %.9g, want %.9g",
          what, ta ? "T" : "N", tb ? "T" : "N", (long long)m, (long long)n, (long long)k, (long long)batch,
          (long long)bad, (long long)nc, (long long)first, (double)got[first], (double)want[first]);
    be->free(ba), be->free(bb), be->free(bc);
    free(A), free(B), free(C), free(want), free(got);
}

static void test_sgemm_layouts(void) {
    for (int t = 0; t < 4; t++) {
        bool ta = t & 1, tb = t & 2;
        check_sgemm("small", ta, tb, 5, 7, 3, 0, 1, false, false, 1.0f, 0.0f, 0);
        check_sgemm("padded rows, beta 1", ta, tb, 33, 17, 65, 3, 1, false, false, 1.0f, 1.0f, 0);
        check_sgemm("one float off alignment", ta, tb, 12, 20, 9, 1, 1, false, false, 0.5f, 1.0f, 1);
        check_sgemm("strided batch", ta, tb, 6, 10, 8, 0, 3, false, false, 1.0f, 0.0f, 0);
    }
    check_sgemm("long inner dimension", false, true, 24, 40, 300, 0, 1, false, false, 1.0f, 0.0f, 0);
    check_sgemm("shared A", false, false, 7, 9, 11, 2, 4, true, false, 1.0f, 1.0f, 1);
    check_sgemm("heads side by side", false, true, 16, 4, 12, 0, 3, false, true, 0.5f, 0.0f, 0);
    check_sgemm("heads side by side, off alignment", true, false, 9, 5, 6, 1, 2, false, true, 1.0f, 1.0f, 1);
}

static void test_empty_inner(void) {
    enum { M = 3, N = 5 };
    float C[M * N], got[M * N];
    for (int i = 0; i < M * N; i++) C[i] = value();
    void *bc;
    float *dC = upload(C, M * N, 0, &bc);
    float *dA = (float *)be->alloc(64), *dB = (float *)be->alloc(64);
    ut_cuda_sgemm(false, false, M, N, 0, 1.0f, dA, 1, 0, dB, N, 0, 1.0f, dC, N, 0, 1);
    be->copy(got, dC, sizeof got, UT_COPY_D2H);
    CHECK(!memcmp(got, C, sizeof C), "k = 0, beta 1: C changed");
    ut_cuda_sgemm(false, false, M, N, 0, 1.0f, dA, 1, 0, dB, N, 0, 0.0f, dC, N, 0, 1);
    be->copy(got, dC, sizeof got, UT_COPY_D2H);
    for (int i = 0; i < M * N; i++) CHECK(got[i] == 0.0f, "k = 0, beta 0: [%d] = %g, want 0", i, (double)got[i]);
    be->free(bc), be->free(dA), be->free(dB);
}

/* TF32 and autocast's rounded operands: the operands are exact in both, so the results are the float32 ones */
static void test_tf32_and_rounded(void) {
    ut_cuda_set_tf32(true);
    CHECK(ut_cuda_tf32(), "ut_cuda_set_tf32(true) did not take");
    check_sgemm("tf32", false, true, 20, 12, 70, 1, 1, false, false, 1.0f, 1.0f, 1);
    check_sgemm("tf32 batch", true, false, 8, 8, 16, 0, 2, false, false, 1.0f, 0.0f, 0);
    ut_cuda_set_tf32(false);
    for (int dt = 1; dt <= 2; dt++) {
        ut_cuda_gemm_rounded(dt);
        CHECK(ut_cuda_gemm_rounding() == dt, "ut_cuda_gemm_rounded(%d) did not take", dt);
        check_sgemm("autocast operands", false, true, 17, 24, 40, 0, 1, false, false, 1.0f, 1.0f, 1);
        check_sgemm("autocast operands, batch", false, false, 6, 8, 10, 2, 3, false, false, 1.0f, 0.0f, 0);
        ut_cuda_gemm_rounded(0);
    }
}

/* 16-bit operands: ut_cuda_gemm16 (float32 C) and ut_cuda_gemm16_out (16-bit D, bias) */
static void check_gemm16(ut_dtype dt, bool ta, bool tb, int64_t m, int64_t n, int64_t k, int64_t pad, float beta,
                         bool bias, int off, bool fused_expected) {
    int64_t lda = (ta ? m : k) + pad, ldb = (tb ? k : n) + pad, ldc = n + pad;
    int64_t na = (ta ? k : m) * lda, nb = (tb ? n : k) * ldb, nc = m * ldc;
    float *A = host_values(na), *B = host_values(nb), *C = host_values(nc), *bv = host_values(n);
    float *want = malloc((size_t)nc * sizeof(float)), *got = malloc((size_t)nc * sizeof(float));
    void *ba, *bb, *bc, *bbias;
    const void *dA = upload16(A, na, dt, off, &ba), *dB = upload16(B, nb, dt, off, &bb);
    /* float32 C */
    float *C32 = malloc((size_t)nc * sizeof(float));
    memcpy(C32, C, (size_t)nc * sizeof(float));
    if (beta == 0.0f)
        for (int64_t i = 0; i < nc; i++) C32[i] = NAN;
    memcpy(want, C32, (size_t)nc * sizeof(float));
    reference(ta, tb, m, n, k, 1.0f, A, lda, 0, B, ldb, 0, beta, C32, want, ldc, 0, 1, NULL);
    float *dC = upload(C32, nc, off, &bc);
    ut_cuda_gemm16(ta, tb, m, n, k, 1.0f, dA, lda, dB, ldb, beta, dC, ldc, (int)dt);
    be->copy(got, dC, (size_t)nc * sizeof(float), UT_COPY_D2H);
    int64_t first = 0, bad = mismatches(got, want, nc, &first);
    CHECK(bad == 0, "gemm16 dtype %d %s%s m %lld n %lld k %lld: %lld differ, first [%lld] %.9g, want %.9g", (int)dt,
          ta ? "T" : "N", tb ? "T" : "N", (long long)m, (long long)n, (long long)k, (long long)bad,
          (long long)first, (double)got[first], (double)want[first]);
    be->free(bc);
    /* 16-bit D: C's values rounded to dt, the exact result rounded once */
    ut_backend_get(UT_CPU)->round(C, C, nc, dt);
    memcpy(want, C, (size_t)nc * sizeof(float));
    reference(ta, tb, m, n, k, 1.0f, A, lda, 0, B, ldb, 0, beta, C, want, ldc, 0, 1, bias ? bv : NULL);
    ut_backend_get(UT_CPU)->round(want, want, nc, dt);
    void *dD = upload16(C, nc, dt, off, &bc);
    const float *dbias = bias ? upload(bv, n, off, &bbias) : NULL;
    bool fused = ut_cuda_gemm16_out(ta, tb, m, n, k, 1.0f, dA, lda, dB, ldb, beta, dD, ldc, (int)dt, dbias);
    download16(got, dD, nc, dt);
    if (fused) {
        /* With beta 1, Hopper's cuBLASLt kernels round the product to dt
         * before adding C (seen on an H200, 2026-11-29): D = rnd(rnd(AB) + C),
         * what PyTorch's bf16 gradient accumulation gives too. Either
         * rounding is taken, element by element, and nothing else. */
        float *twice = NULL;
        if (beta != 0.0f && !bias) {
            twice = malloc((size_t)nc * sizeof(float));
            reference(ta, tb, m, n, k, 1.0f, A, lda, 0, B, ldb, 0, 0.0f, C, twice, ldc, 0, 1, NULL);
            ut_backend_get(UT_CPU)->round(twice, twice, nc, dt);
            for (int64_t i = 0; i < nc; i++) twice[i] += beta * C[i];
            ut_backend_get(UT_CPU)->round(twice, twice, nc, dt);
        }
        int64_t n_twice = 0;
        bad = 0;
        for (int64_t i = 0; i < nc; i++) {
            if (!memcmp(&got[i], &want[i], sizeof(float))) continue;
            if (twice && !memcmp(&got[i], &twice[i], sizeof(float))) {
                n_twice++;
                continue;
            }
            if (!bad++) first = i;
        }
        CHECK(bad == 0, "gemm16_out dtype %d %s%s m %lld n %lld k %lld beta %g%s: %lld differ, first [%lld] %.9g, "
              "want %.9g", (int)dt, ta ? "T" : "N", tb ? "T" : "N", (long long)m, (long long)n, (long long)k,
              (double)beta, bias ? " bias" : "", (long long)bad, (long long)first, (double)got[first],
              (double)want[first]);
        if (n_twice)
            printf("  note: gemm16_out dtype %d %s%s beta %g: %lld of %lld elements rounded twice (product, then "
                   "sum)\n", (int)dt, ta ? "T" : "N", tb ? "T" : "N", (double)beta, (long long)n_twice,
                   (long long)nc);
        free(twice);
    } else {
        bad = mismatches(got, C, nc, &first);
        CHECK(bad == 0, "gemm16_out said it queued nothing, but D changed ([%lld])", (long long)first);
    }
#ifdef UT_CUDA_EMU
    /* the emulated cuBLASLt has these kernels: the fused form must run */
    CHECK(fused == fused_expected, "gemm16_out dtype %d%s: fused %d, expected %d", (int)dt, bias ? " bias" : "",
          (int)fused, (int)fused_expected);
#else
    if (fused != fused_expected)
        printf("  note: gemm16_out dtype %d%s%s: cuBLASLt %s\n", (int)dt, bias ? " with bias" : "",
               off ? " off alignment" : "", fused ? "ran it though this mode leaves it to the caller"
                                                  : "has no kernel: the caller's rounding pass runs");
    CHECK(!fused || fused_expected, "gemm16_out ran in a mode that leaves 16-bit outputs to the caller");
#endif
    be->free(bc), be->free(ba), be->free(bb);
    if (bias) be->free(bbias);
    free(A), free(B), free(C), free(C32), free(bv), free(want), free(got);
}

static bool fused_mode(void) {
    const char *g = getenv("UT_CUDA_GEMM"), *f = getenv("UT_CUDA_LT_FUSED");
    return !(g && !strcmp(g, "cublas")) && !(f && f[0] == '0');
}

/* the same with a float32 bias: not where the emulator's cuBLASLt refuses
 * that with a 16-bit D (UT_EMU_LT_STRICT_BIAS=1), as one without the kernel would */
static bool fused_bias_mode(void) {
    const char *sb = getenv("UT_EMU_LT_STRICT_BIAS");
    return fused_mode() && !(sb && sb[0] == '1');
}

static void test_gemm16(void) {
    bool fx = fused_mode(), fb = fused_bias_mode();
    const ut_dtype dts[2] = {UT_BF16, UT_F16};
    for (int d = 0; d < 2; d++) {
        /* linear's three products: forward (x W^T + bias), dx (dy W, beta 1), dW (dy^T x, beta 1) */
        check_gemm16(dts[d], false, true, 19, 24, 40, 0, 0.0f, true, 0, fb);
        check_gemm16(dts[d], false, true, 8, 16, 32, 0, 0.0f, false, 0, fx);
        check_gemm16(dts[d], false, false, 19, 40, 24, 0, 1.0f, false, 0, fx);
        check_gemm16(dts[d], true, false, 24, 40, 19, 0, 1.0f, false, 0, fx);
        /* one element (2 bytes) off alignment, padded rows */
        check_gemm16(dts[d], false, true, 9, 12, 20, 2, 0.0f, true, 1, fb);
        check_gemm16(dts[d], true, true, 7, 5, 6, 1, 1.0f, false, 1, fx);
    }
}

/* cuBLASLt's GELU epilogue (ut_cuda_gemm16_gelu, linear's fused GELU; x W^T
 * as linear's forward): aux holds the product plus bias (exact) rounded
 * once to dt, to the bit; D is GELU of it in the tanh form within two units
 * in dt's last place (the library does not say which GELU it computes or
 * how: the note gives the largest distance from the tanh form and from the
 * exact erf form, in those units). Without aux, the same D. An aux leading
 * dimension not a multiple of 8 is refused with nothing queued, and so is
 * everything where the mode leaves 16-bit outputs to the caller. */
static double gelu_ref(double v, bool erf_form) {
    return erf_form ? 0.5 * v * (1.0 + erf(v / sqrt(2.0)))
                    : 0.5 * v * (1.0 + tanh(0.7978845608028654 * (v + 0.044715 * v * v * v)));
}

/* dt's unit in the last place at w (bf16: 8 significant bits, fp16: 11), at least that of 2^-6 */
static double ulp16(double w, ut_dtype dt) {
    int e;
    frexp(fmax(fabs(w), 0.015625), &e);
    return ldexp(1.0, e - (dt == UT_BF16 ? 8 : 11));
}

static void check_gemm16_gelu(ut_dtype dt, int64_t m, int64_t n, int64_t k, int64_t ldd, bool bias, bool aux,
                              bool fused_expected) {
    float *A = host_values(m * k), *B = host_values(n * k), *bv = host_values(n);
    float *pre = malloc((size_t)(m * ldd) * sizeof(float)), *got = malloc((size_t)(m * ldd) * sizeof(float));
    float *gaux = malloc((size_t)(m * ldd) * sizeof(float));
    for (int64_t i = 0; i < m * ldd; i++) pre[i] = 0.0f;
    reference(false, true, m, n, k, 1.0f, A, k, 0, B, k, 0, 0.0f, NULL, pre, ldd, 0, 1, bias ? bv : NULL);
    void *ba, *bb, *bd, *bx, *bbias;
    const void *dA = upload16(A, m * k, dt, 0, &ba), *dB = upload16(B, n * k, dt, 0, &bb);
    for (int64_t i = 0; i < m * ldd; i++) got[i] = 7.0f; /* what D and aux hold before */
    void *dD = upload16(got, m * ldd, dt, 0, &bd), *dX = upload16(got, m * ldd, dt, 0, &bx);
    const float *dbias = bias ? upload(bv, n, 0, &bbias) : NULL;
    bool fused = ut_cuda_gemm16_gelu(false, true, m, n, k, dA, k, dB, k, dD, ldd, (int)dt, dbias, aux ? dX : NULL);
    download16(got, dD, m * ldd, dt);
    download16(gaux, dX, m * ldd, dt);
    char what[96];
    snprintf(what, sizeof what, "gemm16_gelu dtype %d m %lld n %lld ld %lld%s%s", (int)dt, (long long)m, (long long)n,
             (long long)ldd, bias ? " bias" : "", aux ? " aux" : "");
    if (fused) {
        double worst[2] = {0, 0};
        int64_t bad = 0, bad_aux = 0, first = 0;
        for (int64_t i = 0; i < m; i++)
            for (int64_t j = 0; j < n; j++) {
                int64_t o = i * ldd + j;
                float r = pre[o];
                ut_backend_get(UT_CPU)->round(&r, &r, 1, dt);
                if (aux && memcmp(&gaux[o], &r, sizeof r)) bad_aux++;
                for (int f = 0; f < 2; f++) {
                    double w = gelu_ref((double)pre[o], f == 1), d = fabs((double)got[o] - w) / ulp16(w, dt);
                    if (d > worst[f]) worst[f] = d;
                    if (f == 0 && d > 2.0 && !bad++) first = o;
                }
            }
        CHECK(bad_aux == 0, "%s: %lld pre-activations differ from the product rounded once", what, (long long)bad_aux);
        CHECK(bad == 0, "%s: %lld outputs more than 2 units from the tanh form, first [%lld] %.9g for %.9g", what,
              (long long)bad, (long long)first, (double)got[first], (double)pre[first]);
        printf("  note: %s: largest distance from GELU's tanh form %.2f units in dt's last place, from its erf "
               "form %.2f\n", what, worst[0], worst[1]);
    } else {
        int64_t changed = 0;
        for (int64_t i = 0; i < m * ldd; i++) changed += got[i] != 7.0f || gaux[i] != 7.0f;
        CHECK(changed == 0, "%s said it queued nothing, but %lld values changed", what, (long long)changed);
    }
#ifdef UT_CUDA_EMU
    CHECK(fused == fused_expected, "%s: fused %d, expected %d", what, (int)fused, (int)fused_expected);
#else
    if (fused != fused_expected)
        printf("  note: %s: cuBLASLt %s\n", what, fused ? "ran it though this mode leaves it to the caller"
                                                         : "has no kernel: linear's own GELU runs");
    CHECK(!fused || fused_expected, "%s ran in a mode that leaves 16-bit outputs to the caller", what);
#endif
    be->free(ba), be->free(bb), be->free(bd), be->free(bx);
    if (bias) be->free(bbias);
    free(A), free(B), free(bv), free(pre), free(got), free(gaux);
}

static void test_gemm16_gelu(void) {
    bool fx = fused_mode(), fb = fused_bias_mode();
    const ut_dtype dts[2] = {UT_BF16, UT_F16};
    for (int d = 0; d < 2; d++) {
        /* k 8: sums of about 2 in magnitude, where GELU bends */
        check_gemm16_gelu(dts[d], 37, 64, 8, 64, true, true, fb);
        check_gemm16_gelu(dts[d], 37, 64, 8, 64, false, true, fx);
        check_gemm16_gelu(dts[d], 37, 64, 8, 64, true, false, fb);
        check_gemm16_gelu(dts[d], 37, 60, 8, 60, true, true, false); /* aux rows 60 apart: refused */
    }
}

/* one mode in a child process (gemm.cu reads its switches once); its result as the exit code */
static void run_mode(const char *var, const char *val) {
    fflush(stdout);
    pid_t pid = fork();
    CHECK(pid >= 0, "fork failed");
    if (pid == 0) {
        t_failed = 0; /* the parent's earlier failures are not this mode's */
        if (var) setenv(var, val, 1);
        printf("mode %s%s%s:\n", var ? var : "cuBLASLt (default)", var ? "=" : "", var ? val : "");
        if (ut_backend_check(UT_CUDA, skip_why, sizeof skip_why) != 0) {
            printf("  skip: %s\n", skip_why);
            fflush(stdout);
            _exit(0);
        }
        be = ut_backend_get(UT_CUDA);
        RUN(test_sgemm_layouts);
        RUN(test_empty_inner);
        RUN(test_tf32_and_rounded);
        RUN(test_gemm16);
        RUN(test_gemm16_gelu);
        fflush(stdout);
        _exit(t_failed ? 1 : 0);
    }
    int st = 0;
    waitpid(pid, &st, 0);
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0, "mode %s=%s failed (status %d)", var ? var : "default",
          val ? val : "", st);
}

static void test_cublaslt(void) { run_mode(NULL, NULL); }
static void test_classic_cublas(void) { run_mode("UT_CUDA_GEMM", "cublas"); }
static void test_unfused_16bit_outputs(void) { run_mode("UT_CUDA_LT_FUSED", "0"); }
#ifdef UT_CUDA_EMU
/* the heuristic finding no kernel for the fused 16-bit output with a float32 bias: nothing queued */
static void test_bias_refused(void) { run_mode("UT_EMU_LT_STRICT_BIAS", "1"); }
#endif

int main(void) {
    RUN(test_cublaslt);
    RUN(test_classic_cublas);
    RUN(test_unfused_16bit_outputs);
#ifdef UT_CUDA_EMU
    RUN(test_bias_refused);
#endif
    return TEST_SUMMARY();
}
