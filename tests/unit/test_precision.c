/* Mixed precision: the 16-bit storage conversions (reference values, ties,
 * subnormals, inf, NaN; vector paths against the scalar ones; every bf16 and
 * f16 value round trip), ut_tensor_to. */
#include <stdint.h>
#include <string.h>

#include "../../src/backend/backend.h"
#include "test.h"
#include "utrain/base.h"
#include "utrain/ops.h"
#include "utrain/tensor.h"

/* the CPU backend's kernels (src/backend/cpu/convert.c) */
uint16_t ut_f32_to_bf16_scalar(float f);
float ut_bf16_to_f32_scalar(uint16_t h);
uint16_t ut_f32_to_f16_scalar(float f);
float ut_f16_to_f32_scalar(uint16_t h);

static float fbits(uint32_t u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}
static uint32_t bitsf(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

/* f16 of x through the backend's array path (F16C where built in) */
static uint16_t f16_vec(float x) {
    float in[9];
    uint16_t out[9];
    for (int i = 0; i < 9; i++) in[i] = x; /* 8 through the vector path, 1 through the tail */
    ut_backend_get(UT_CPU)->convert(out, UT_F16, in, UT_F32, 9);
    CHECK(out[0] == out[8], "vector %04x vs tail %04x for %a", out[0], out[8], (double)x);
    return out[0];
}

static void test_bf16_reference(void) {
    static const struct { uint32_t in; uint16_t want; } cases[] = {
        {0x3f800000u, 0x3f80}, /* 1.0 */
        {0x3f808000u, 0x3f80}, /* 1 + 2^-8: tie, to even (down) */
        {0x3f818000u, 0x3f82}, /* 1 + 3*2^-8: tie, to even (up) */
        {0x3f808001u, 0x3f81}, /* just above the tie */
        {0x3f807fffu, 0x3f80}, /* just below */
        {0xbf808001u, 0xbf81}, /* negative */
        {0x7f7fffffu, 0x7f80}, /* FLT_MAX rounds to inf */
        {0x7f800000u, 0x7f80}, {0xff800000u, 0xff80}, /* inf */
        {0x00010000u, 0x0001}, /* smallest bf16 subnormal */
        {0x00008000u, 0x0000}, /* half of it: tie to even zero */
        {0x00018000u, 0x0002}, /* 1.5 of it: tie to even 2 */
        {0x80000000u, 0x8000}, /* -0 */
    };
    const ut_backend *b = ut_backend_get(UT_CPU);
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        float x = fbits(cases[i].in);
        uint16_t got = ut_f32_to_bf16_scalar(x), vec;
        b->convert(&vec, UT_BF16, &x, UT_F32, 1);
        CHECK(got == cases[i].want && vec == got, "bf16(%08x) = %04x / %04x, want %04x",
              cases[i].in, got, vec, cases[i].want);
    }
    uint16_t nan = ut_f32_to_bf16_scalar(fbits(0x7f800001u)); /* signalling NaN, low payload */
    CHECK(isnan(ut_bf16_to_f32_scalar(nan)), "NaN stays NaN (%04x)", nan);
    CHECK(isnan(ut_bf16_to_f32_scalar(ut_f32_to_bf16_scalar(NAN))), "quiet NaN");
}

static void test_f16_reference(void) {
    static const struct { float in; uint16_t want; } cases[] = {
        {1.0f, 0x3c00}, {-2.0f, 0xc000}, {65504.0f, 0x7bff},
        {65519.99f, 0x7bff}, {65520.0f, 0x7c00}, /* the overflow threshold */
        {1e6f, 0x7c00}, {-INFINITY, 0xfc00},
        {0x1p-24f, 0x0001}, /* smallest subnormal */
        {0x1p-25f, 0x0000}, /* half of it: tie to even zero */
        {0x1.8p-25f, 0x0001}, /* 0.75 of it: up */
        {0x1.8p-24f, 0x0002}, /* 1.5 of it: tie to even 2 */
        {0x1p-14f, 0x0400}, /* smallest normal */
        {0x1.ffcp-15f, 0x0400}, /* largest subnormal + half an ulp: ties up to the normal */
        {1.0f + 0x1p-11f, 0x3c00}, /* tie, even down */
        {1.0f + 0x3p-11f, 0x3c02}, /* tie, even up */
        {-0.0f, 0x8000}, {1e-10f, 0x0000},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        uint16_t got = ut_f32_to_f16_scalar(cases[i].in), vec = f16_vec(cases[i].in);
        CHECK(got == cases[i].want && vec == got, "f16(%a) = %04x / %04x, want %04x",
              (double)cases[i].in, got, vec, cases[i].want);
    }
    CHECK(isnan(ut_f16_to_f32_scalar(ut_f32_to_f16_scalar(NAN))), "NaN");
    CHECK(isnan(ut_f16_to_f32_scalar(f16_vec(fbits(0x7f800001u)))), "signalling NaN stays NaN");
}

/* Every 16-bit pattern to float32 and back: itself (NaNs: a NaN), the array
 * paths equal to the scalar ones. */
static void test_all_values_round_trip(void) {
    static uint16_t h[65536], back[65536];
    static float f[65536];
    const ut_backend *b = ut_backend_get(UT_CPU);
    for (int i = 0; i < 65536; i++) h[i] = (uint16_t)i;
    int bad = 0;
    for (int k = 0; k < 2; k++) {
        ut_dtype dt = k ? UT_F16 : UT_BF16;
        b->convert(f, UT_F32, h, dt, 65536);
        b->convert(back, dt, f, UT_F32, 65536);
        for (int i = 0; i < 65536; i++) {
            float s = k ? ut_f16_to_f32_scalar(h[i]) : ut_bf16_to_f32_scalar(h[i]);
            bool nan = isnan(f[i]);
            if (nan ? !isnan(s) || !(k ? (back[i] & 0x7c00) == 0x7c00 : (back[i] & 0x7f80) == 0x7f80)
                    : (back[i] != h[i] || bitsf(s) != bitsf(f[i])))
                bad++;
        }
    }
    CHECK(bad == 0, "%d values do not round trip", bad);
}

/* Random float32 bit patterns: vector paths equal scalar ones; rounding
 * (backend->round) equals the round trip; the result is the nearest value. */
static void test_vector_matches_scalar(void) {
    enum { N = 100003 };
    static float x[N], r[N], back[N];
    static uint16_t h[N];
    uint64_t s = 0x9e3779b97f4a7c15ull;
    for (int i = 0; i < N; i++) {
        s ^= s << 13, s ^= s >> 7, s ^= s << 17;
        x[i] = fbits((uint32_t)s);
        if (i % 3 == 0) x[i] = fbits(((uint32_t)s & 0x87ffffffu) | 0x30000000u); /* f16's range */
    }
    const ut_backend *b = ut_backend_get(UT_CPU);
    for (int k = 0; k < 2; k++) {
        ut_dtype dt = k ? UT_F16 : UT_BF16;
        b->convert(h, dt, x, UT_F32, N);
        b->convert(back, UT_F32, h, dt, N);
        b->round(r, x, N, dt);
        int bad = 0, far = 0;
        for (int i = 0; i < N; i++) {
            uint16_t want = k ? ut_f32_to_f16_scalar(x[i]) : ut_f32_to_bf16_scalar(x[i]);
            if (h[i] != want || bitsf(r[i]) != bitsf(back[i])) bad++;
            /* nearest: the error is at most half an ulp of the 16-bit type */
            double ulp = k ? 0x1p-10 : 0x1p-7, e = fabs((double)back[i] - x[i]);
            int ex;
            frexp(x[i], &ex);
            if (isfinite(back[i]) && isfinite(x[i]) && e > ldexp(ulp, ex - 1) * 0.5 + 0x1p-25) far++;
        }
        CHECK(bad == 0 && far == 0, "%s: %d differ from scalar, %d not nearest", ut_dtype_name(dt),
              bad, far);
    }
}

static void test_tensor_to(void) {
    ut_ctx *ctx = ut_ctx_new(NULL);
    float v[5] = {1.0f, 1.0f + 0x1p-9f, 3.14159265f, -70000.0f, 0x1p-20f};
    int64_t ne[1] = {5};
    ut_tensor *t = ut_tensor_from(ctx, UT_F32, 1, ne, v);
    ut_tensor *bf = ut_tensor_to(ctx, t, UT_BF16), *hf = ut_tensor_to(ctx, t, UT_F16);
    CHECK(bf && hf && bf->dtype == UT_BF16 && hf->dtype == UT_F16, "dtypes");
    uint16_t hb[5], hh[5];
    CHECK(ut_tensor_get(bf, hb, sizeof hb) == 0 && ut_tensor_get(hf, hh, sizeof hh) == 0, "get");
    CHECK(hb[0] == 0x3f80 && hb[2] == 0x4049 && hb[3] == 0xc789, "bf16 %04x %04x %04x", hb[0],
          hb[2], hb[3]);
    CHECK(hh[0] == 0x3c00 && hh[2] == 0x4248 && hh[3] == 0xfc00 && hh[4] == 0x0010,
          "f16 %04x %04x %04x %04x", hh[0], hh[2], hh[3], hh[4]);
    ut_tensor *back = ut_tensor_to(ctx, hf, UT_BF16), *f = ut_tensor_to(ctx, back, UT_F32);
    float out[5];
    CHECK(f && ut_tensor_get(f, out, sizeof out) == 0, "f16 -> bf16 -> f32");
    CHECK(out[0] == 1.0f && isinf(out[3]) && out[3] < 0 && out[4] == 0x1p-20f, "%g %g %g", out[0],
          out[3], out[4]);
    int32_t iv[5] = {0};
    ut_tensor *it = ut_tensor_from(ctx, UT_I32, 1, ne, iv);
    CHECK(ut_tensor_to(ctx, it, UT_F32) == NULL, "i32 refused");
    CHECK(strstr(ut_ctx_error(ctx), "tensor_to") && strstr(ut_ctx_error(ctx), "i32"), "%s",
          ut_ctx_error(ctx));
    ut_ctx_free(ctx);
}

int main(void) {
    RUN(test_bf16_reference);
    RUN(test_f16_reference);
    RUN(test_all_values_round_trip);
    RUN(test_vector_matches_scalar);
    RUN(test_tensor_to);
    return TEST_SUMMARY();
}
