/* Mixed precision: the 16-bit storage conversions (reference values, ties,
 * subnormals, inf, NaN; vector paths against the scalar ones; every bf16 and
 * f16 value round trip), ut_tensor_to; autocast: each op's forward and
 * backward in bf16 and f16 against float32 (one table row per op). */
#include <omp.h>
#include <stdint.h>
#include <string.h>

#include "../../src/backend/backend.h"
#include "test.h"
#include "utrain/base.h"
#include "utrain/ops.h"
#include "utrain/tensor.h"
#include "utrain/utrain.h"

/* the CPU backend's kernels (src/backend/cpu/convert.c) */
uint16_t ut_f32_to_bf16_scalar(float f);
float ut_bf16_to_f32_scalar(uint16_t h);
uint16_t ut_f32_to_f16_scalar(float f);
float ut_f16_to_f32_scalar(uint16_t h);
/* src/backend/cpu/matmul.c and dnnl_matmul.c */
void ut_cpu_lowp_block_set(int64_t rows, int64_t min_bytes);
void ut_bf16_force_dnnl(int on);
bool ut_bf16_use_dnnl(void);

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

/* ---- autocast: one row per op, forward and backward against float32 ---- */
#define MAXIN 5
typedef struct {
    const char *name;
    int nin;
    int ndim[MAXIN];
    int64_t ne[MAXIN][4];
    ut_tensor *(*fn)(ut_ctx *ctx, ut_tensor **in);
    bool rounded; /* its output is a 16-bit value under autocast */
} ac_case;

static ut_tensor *f_linear(ut_ctx *c, ut_tensor **in) { return ut_linear(c, in[0], in[1], in[2]); }
static ut_tensor *f_matmul(ut_ctx *c, ut_tensor **in) { return ut_matmul(c, in[0], in[1]); }
static ut_tensor *f_conv(ut_ctx *c, ut_tensor **in) { return ut_conv2d(c, in[0], in[1], in[2], 1, 1); }
static ut_tensor *f_attn(ut_ctx *c, ut_tensor **in) { return ut_attention(c, in[0], 2); }
/* float32 inside, output stored in the autocast dtype, as layernorm */
static ut_tensor *f_rms(ut_ctx *c, ut_tensor **in) { return ut_rms_norm(c, in[0], in[1], 1e-6f); }
/* a block as a model runs it: layernorm (f32) -> linear -> gelu -> softmax (f32) */
static ut_tensor *f_block(ut_ctx *c, ut_tensor **in) {
    ut_tensor *h = ut_layernorm(c, in[0], in[3], in[4], 1e-5f);
    return ut_softmax(c, ut_gelu(c, ut_linear(c, h, in[1], in[2])));
}

static const ac_case ac_cases[] = {
    {"linear", 3, {2, 2, 1}, {{6, 40}, {24, 40}, {24}}, f_linear, true},
    {"matmul", 2, {3, 3}, {{2, 5, 33}, {2, 33, 7}}, f_matmul, true},
    {"matmul_shared_b", 2, {3, 2}, {{2, 5, 33}, {33, 7}}, f_matmul, true},
    {"conv2d", 3, {4, 4, 1}, {{2, 3, 6, 6}, {4, 3, 3, 3}, {4}}, f_conv, true},
    {"attention", 1, {3}, {{2, 5, 24}}, f_attn, true},
    {"block", 5, {2, 2, 1, 1, 1}, {{6, 40}, {24, 40}, {24}, {40}, {40}}, f_block, false},
    {"rms_norm", 2, {3, 1}, {{2, 3, 40}, {40}}, f_rms, true},
};

typedef struct { float *y, *g[MAXIN]; int64_t ny, ng[MAXIN]; } ac_result;

static uint64_t lcg(uint64_t *s) { return *s = *s * 6364136223846793005ull + 1442695040888963407ull; }
static float unif(uint64_t *s) { return (float)((lcg(s) >> 40) * 0x1p-24) * 2.0f - 1.0f; }

/* The row's op on seeded inputs under autocast dt, backward of sum(y * r)
 * with a fixed random r: its output and its inputs' gradients. */
static ac_result ac_run(const ac_case *c, ut_dtype dt) {
    ut_ctx *ctx = ut_ctx_new(NULL);
    ut_ctx_set_autocast(ctx, dt);
    uint64_t s = 42;
    ut_tensor *in[MAXIN] = {0};
    for (int i = 0; i < c->nin; i++) {
        in[i] = ut_tensor_new(ctx, UT_F32, c->ndim[i], c->ne[i]);
        for (int64_t k = 0; k < ut_nelem(in[i]); k++) ut_f32(in[i])[k] = unif(&s);
        ut_tensor_set_requires_grad(in[i], true);
    }
    ut_tensor *y = c->fn(ctx, in);
    CHECK(y, "%s: %s", c->name, ut_ctx_error(ctx));
    ac_result r = {.ny = y ? ut_nelem(y) : 0};
    if (!y) return ut_ctx_free(ctx), r;
    ut_tensor *w = ut_tensor_new(ctx, UT_F32, y->ndim, y->ne);
    for (int64_t k = 0; k < r.ny; k++) ut_f32(w)[k] = unif(&s);
    CHECK(ut_backward(ctx, ut_sum(ctx, ut_mul(ctx, y, w))) == 0, "%s backward", c->name);
    /* autocast's products are stored in dt; ops after them read them as f32 */
    CHECK(y->dtype == (c->rounded ? dt : UT_F32), "%s %s: output stored as %s", c->name,
          ut_dtype_name(dt), ut_dtype_name(y->dtype));
    ut_tensor *yf = ut_tensor_to(ctx, y, UT_F32);
    r.y = malloc((size_t)r.ny * 4);
    memcpy(r.y, yf->data, (size_t)r.ny * 4);
    for (int i = 0; i < c->nin; i++) {
        r.ng[i] = ut_nelem(in[i]);
        r.g[i] = malloc((size_t)r.ng[i] * 4);
        memcpy(r.g[i], in[i]->grad, (size_t)r.ng[i] * 4);
    }
    ut_ctx_free(ctx);
    return r;
}

static void ac_free(ac_result *r) {
    free(r->y);
    for (int i = 0; i < MAXIN; i++) free(r->g[i]);
}

/* ||a - b|| / ||b|| */
static double rel_err(const float *a, const float *b, int64_t n) {
    double d = 0, nb = 0;
    for (int64_t i = 0; i < n; i++) d += ((double)a[i] - b[i]) * ((double)a[i] - b[i]), nb += (double)b[i] * b[i];
    return sqrt(d / (nb > 0 ? nb : 1));
}

/* Tolerances: a few units of each format's rounding (2^-9 for bf16's 8-bit
 * significand, 2^-12 for f16's 11-bit), since every operand and the output
 * are rounded once; the errors must also be non-zero (autocast did round). */
static void test_autocast_ops(void) {
    for (size_t k = 0; k < sizeof ac_cases / sizeof *ac_cases; k++) {
        const ac_case *c = &ac_cases[k];
        ac_result ref = ac_run(c, UT_F32);
        for (int d = 0; d < 2 && ref.y; d++) {
            ut_dtype dt = d ? UT_F16 : UT_BF16;
            double tol = d ? 4 * 0x1p-12 : 4 * 0x1p-9;
            ac_result lp = ac_run(c, dt);
            if (!lp.y) continue;
            double ey = rel_err(lp.y, ref.y, ref.ny);
            CHECK(ey > 0 && ey < tol, "%s %s: output error %.3g (tol %.3g)", c->name,
                  ut_dtype_name(dt), ey, tol);
            for (int i = 0; i < c->nin; i++) {
                double eg = rel_err(lp.g[i], ref.g[i], ref.ng[i]);
                CHECK(eg > 0 && eg < 2 * tol, "%s %s: input %d gradient error %.3g", c->name,
                      ut_dtype_name(dt), i, eg);
            }
            float *r = malloc((size_t)ref.ny * 4);
            ut_backend_get(UT_CPU)->round(r, lp.y, ref.ny, dt);
            CHECK((memcmp(r, lp.y, (size_t)ref.ny * 4) == 0) == c->rounded,
                  "%s %s: output %s 16-bit values", c->name, ut_dtype_name(dt),
                  c->rounded ? "should hold only" : "should not be rounded to");
            free(r);
            ac_free(&lp);
        }
        ac_free(&ref);
    }
}

/* Gradients of parameters stay float32: a weight's gradient is not rounded. */
static void test_autocast_off_is_fp32(void) {
    ut_ctx *ctx = ut_ctx_new(NULL);
    CHECK(ut_ctx_autocast(ctx) == UT_F32, "off by default");
    CHECK(ut_ctx_set_autocast(ctx, UT_BF16) == UT_F32 && ut_ctx_autocast(ctx) == UT_BF16, "set");
    ut_ctx_free(ctx);
    ac_result a = ac_run(&ac_cases[0], UT_F32), b = ac_run(&ac_cases[0], UT_F32);
    CHECK(!memcmp(a.y, b.y, (size_t)a.ny * 4) && !memcmp(a.g[1], b.g[1], (size_t)a.ng[1] * 4),
          "f32 deterministic");
    ac_result l = ac_run(&ac_cases[0], UT_BF16);
    float *r = malloc((size_t)l.ng[1] * 4);
    ut_backend_get(UT_CPU)->round(r, l.g[1], l.ng[1], UT_BF16);
    CHECK(memcmp(r, l.g[1], (size_t)l.ng[1] * 4) != 0, "weight gradient accumulated in f32");
    free(r);
    ac_free(&a), ac_free(&b), ac_free(&l);
}

/* ---- activation memory: the arena's peak over a GPT-2 training step ---- */
/* configs/gpt2_kjv.yml's model (4 layers, 4 heads, n_embd 128, vocab 256),
 * batch B x T of seeded tokens: forward, loss, backward under autocast dt;
 * returns ut_ctx_peak_bytes, the loss in *loss. */
/* A GPT-2 of the given sizes (seed 3); NULL after a failed check. */
static ut_model *small_gpt2(const char *layers, const char *heads, const char *embd, const char *vocab,
                            const char *block) {
    ut_kv *kv = ut_kv_new();
    const char *keys[][2] = {{"n_layer", layers}, {"n_head", heads}, {"n_embd", embd},
                             {"vocab_size", vocab}, {"block_size", block}};
    for (int i = 0; i < 5; i++) ut_kv_set(kv, keys[i][0], keys[i][1]);
    char err[256];
    ut_model *m = ut_model_create("gpt2", kv, 3, err, sizeof err);
    ut_kv_free(kv);
    CHECK(m, "%s", err);
    return m;
}

static size_t gpt2_step_peak(ut_dtype dt, int B, int T, float *loss, float **grad, int64_t *ng) {
    ut_model *m = small_gpt2("4", "4", "128", "256", "128");
    if (!m) return 0;
    ut_ctx *ctx = ut_ctx_new(&(ut_ctx_opts){.seed = 7});
    ut_ctx_set_autocast(ctx, dt);
    int32_t *tok = malloc(sizeof(int32_t) * 2 * B * T);
    uint64_t s = 5;
    for (int i = 0; i < 2 * B * T; i++) tok[i] = (int32_t)(lcg(&s) >> 56);
    int64_t ne[2] = {B, T};
    ut_tensor *x = ut_tensor_from(ctx, UT_I32, 2, ne, tok);
    ut_tensor *y = ut_tensor_from(ctx, UT_I32, 2, ne, tok + B * T);
    ut_ctx_reset_peak(ctx);
    ut_tensor *l = ut_model_loss(m, ctx, ut_model_forward(m, ctx, x), y);
    CHECK(l && ut_backward(ctx, l) == 0, "%s backward: %s", ut_dtype_name(dt), ut_ctx_error(ctx));
    size_t peak = ut_ctx_peak_bytes(ctx);
    if (l) ut_tensor_get(l, loss, sizeof *loss);
    *ng = m->params.numel;
    *grad = malloc(sizeof(float) * (size_t)*ng);
    memcpy(*grad, m->params.flat_grad, sizeof(float) * (size_t)*ng);
    free(tok);
    ut_ctx_free(ctx);
    ut_model_free(m);
    return peak;
}

/* ut_model_forward_loss: GPT-2's head and loss as one op (forward_loss),
 * with or without a place for the output (NULL: not wanted; else NULL is
 * put there, no logits being made), against the forward and the loss as
 * two ops: the same loss and gradients to the bit, in float32 and bf16,
 * and a lower activation peak. */
static void test_model_forward_loss(void) {
    const ut_dtype dts[2] = {UT_F32, UT_BF16};
    for (int d = 0; d < 2; d++) {
        ut_model *m = small_gpt2("2", "2", "64", "250", "32");
        CHECK(!m || m->forward_loss, "gpt2 has no forward_loss");
        if (!m || !m->forward_loss) {
            ut_model_free(m);
            continue;
        }
        int B = 3, T = 16;
        int32_t tok[2 * 3 * 16];
        uint64_t s = 11;
        for (int i = 0; i < 2 * B * T; i++) tok[i] = (int32_t)((lcg(&s) >> 40) % 250);
        float loss[3] = {0};
        size_t peak[3] = {0};
        float *grad[3] = {0};
        int64_t n = m->params.numel;
        for (int way = 0; way < 3; way++) {
            ut_ctx *ctx = ut_ctx_new(&(ut_ctx_opts){.seed = 7});
            ut_ctx_set_autocast(ctx, dts[d]);
            ut_tensor *x = ut_tensor_from(ctx, UT_I32, 2, (int64_t[]){B, T}, tok);
            ut_tensor *y = ut_tensor_from(ctx, UT_I32, 2, (int64_t[]){B, T}, tok + B * T);
            ut_model_zero_grad(m);
            ut_ctx_reset_peak(ctx);
            ut_tensor *out = x, *l;
            if (way == 0) l = ut_model_forward_loss(m, ctx, x, y, NULL);
            else if (way == 1) l = ut_model_forward_loss(m, ctx, x, y, &out);
            else l = ut_model_loss(m, ctx, ut_model_forward(m, ctx, x), y);
            CHECK(l && ut_backward(ctx, l) == 0, "%s way %d: %s", ut_dtype_name(dts[d]), way, ut_ctx_error(ctx));
            if (way == 1) CHECK(out == NULL, "forward_loss made no output: *output must be NULL");
            peak[way] = ut_ctx_peak_bytes(ctx);
            if (l) ut_tensor_get(l, &loss[way], sizeof loss[way]);
            grad[way] = malloc(sizeof(float) * (size_t)n);
            memcpy(grad[way], m->params.flat_grad, sizeof(float) * (size_t)n);
            ut_ctx_free(ctx);
        }
        for (int way = 0; way < 2; way++) {
            CHECK(loss[way] == loss[2] && isfinite(loss[2]), "%s: loss %.9g, two ops %.9g", ut_dtype_name(dts[d]),
                  (double)loss[way], (double)loss[2]);
            CHECK(!memcmp(grad[way], grad[2], sizeof(float) * (size_t)n),
                  "%s: the gradients differ from the two ops'", ut_dtype_name(dts[d]));
        }
        CHECK(peak[0] < peak[2], "%s: peak %zu with the op, %zu as two ops", ut_dtype_name(dts[d]), peak[0],
              peak[2]);
        for (int way = 0; way < 3; way++) free(grad[way]);
        ut_model_free(m);
    }
}

/* bf16 stores the products' outputs (and gelu's) and their gradients in 2
 * bytes: the step's activation peak must be at most 0.6 of float32's, with
 * the loss and the parameters' gradients close to float32's (a few bf16
 * roundings per layer: 5% on the gradients' norm). */
static void test_bf16_halves_activations(void) {
    float l32 = 0, l16 = 0, *g32, *g16;
    int64_t n32, n16;
    size_t p32 = gpt2_step_peak(UT_F32, 16, 128, &l32, &g32, &n32);
    size_t p16 = gpt2_step_peak(UT_BF16, 16, 128, &l16, &g16, &n16);
    double eg = rel_err(g16, g32, n32);
    printf("     loss %.5f fp32, %.5f bf16; parameter gradients' relative error %.3g\n", l32, l16, eg);
    CHECK(n16 == n32 && eg > 0 && eg < 0.05, "gradients: relative error %g", eg);
    free(g32), free(g16);
    printf("     GPT-2 (4 x 128, vocab 256) batch 16 x 128: peak %.1f MiB fp32, %.1f MiB bf16 (%.2f)\n",
           p32 / 1048576.0, p16 / 1048576.0, (double)p16 / (double)p32);
    CHECK(p32 > 0 && p16 <= 0.6 * (double)p32, "bf16 peak %zu vs fp32 %zu", p16, p32);
    CHECK(fabsf(l16 - l32) < 0.02f * fabsf(l32), "loss %g bf16 vs %g fp32", l16, l32);
}

/* A linear's 16-bit logits into cross-entropy, under autocast dt: the loss
 * and the logits' 16-bit gradient are the bits float32 cross-entropy gives on
 * the logits' values (its gradient then rounded to dt), no float32 copy of
 * the logits or of their gradient is kept beside the linear's own output
 * buffer (before, cross-entropy's input and both gradients had one each).
 * The rounded copies' bytes are checked on GPT-2 by tests/e2e/test_plan.c. */
static void ce16_case(ut_dtype dt) {
    enum { N = 48, C = 16, V = 1000 };
    ut_ctx *ctx = ut_ctx_new(NULL), *ref = ut_ctx_new(NULL);
    ut_ctx_set_autocast(ctx, dt);
    uint64_t s = 7;
    ut_tensor *x = ut_tensor_new2(ctx, UT_F32, N, C), *w = ut_tensor_new2(ctx, UT_F32, V, C);
    for (int64_t k = 0; k < N * C; k++) ut_f32(x)[k] = 2.0f * unif(&s);
    for (int64_t k = 0; k < V * C; k++) ut_f32(w)[k] = unif(&s);
    ut_tensor_set_requires_grad(x, true), ut_tensor_set_requires_grad(w, true);
    int64_t nn = N;
    int32_t tg[N];
    for (int n = 0; n < N; n++) tg[n] = n % 7 == 3 ? -1 : (int32_t)(lcg(&s) >> 33) % V;
    ut_tensor *targets = ut_tensor_from(ctx, UT_I32, 1, &nn, tg);
    ut_tensor *logits = ut_linear(ctx, x, w, NULL);
    ut_tensor *loss = ut_cross_entropy(ctx, logits, targets, -1);
    CHECK(loss && logits->dtype == dt && ut_backward(ctx, ut_scale(ctx, loss, 8.0f)) == 0, "%s: %s",
          ut_dtype_name(dt), ut_ctx_error(ctx));
    if (!loss) goto out;
    ut_tensor *lf = ut_tensor_to(ref, logits, UT_F32);
    ut_tensor_set_requires_grad(lf, true);
    ut_tensor *lref = ut_cross_entropy(ref, lf, ut_tensor_from(ref, UT_I32, 1, &nn, tg), -1);
    CHECK(lref && ut_backward(ref, ut_scale(ref, lref, 8.0f)) == 0, "reference: %s", ut_ctx_error(ref));
    CHECK(bitsf(ut_f32(loss)[0]) == bitsf(ut_f32(lref)[0]), "%s loss %.9g vs float32 %.9g", ut_dtype_name(dt),
          ut_f32(loss)[0], ut_f32(lref)[0]);
    int64_t ne[2] = {N, V};
    ut_tensor *gref = ut_tensor_to(ref, ut_tensor_from(ref, UT_F32, 2, ne, lf->grad), dt);
    CHECK(memcmp(gref->data, logits->grad, (size_t)N * V * 2) == 0, "%s logits' gradient differs from float32's",
          ut_dtype_name(dt));
    /* on a CPU with bf16 instructions the linear's bf16 products also take
     * their oneDNN operands from the scratch: the backward's, (N, V) and (V, C) */
    size_t scratch = ut_ctx_autocast_scratch_bytes(ctx), one = (size_t)N * V * sizeof(float);
    size_t operands = dt == UT_BF16 && ut_bf16_use_dnnl() ? (size_t)(N * V + V * C) * sizeof(uint16_t) : 0;
    CHECK(scratch >= one && scratch < 2 * one + operands, "%s conversion scratch %zu bytes, logits %zu in float32",
          ut_dtype_name(dt), scratch, one);
out:
    ut_ctx_free(ref);
    ut_ctx_free(ctx);
}

static void test_cross_entropy_16bit_logits(void) {
    ce16_case(UT_BF16);
    ce16_case(UT_F16);
}

/* ---- a linear's 16-bit output computed a block of rows at a time ---- */
/* 232 rows: four blocks of 48 and a tail of 40; dw in six blocks of 48
 * columns. Every block's product is over 10^6 multiply-adds: OpenBLAS's
 * SkylakeX kernels take products under that through their small-matrix
 * kernels, which sum in another order than the large-product tiles (a
 * blocked output is only ever at least 16 MiB: its blocks are far larger). */
enum { LN = 232, LC = 128, LOC = 288 };

typedef struct { uint16_t y[LN * LOC]; float dx[LN * LC], dw[LOC * LC], db[LOC]; size_t scratch; } lin16;

/* y = x @ w^T + b under bf16 autocast into cross-entropy (which reads the
 * 16-bit y itself), backward, seeded. */
static void lin16_run(lin16 *o) {
    ut_ctx *ctx = ut_ctx_new(NULL);
    ut_ctx_set_autocast(ctx, UT_BF16);
    uint64_t s = 11;
    ut_tensor *x = ut_tensor_new2(ctx, UT_F32, LN, LC), *w = ut_tensor_new2(ctx, UT_F32, LOC, LC);
    int64_t noc = LOC, nn = LN;
    ut_tensor *b = ut_tensor_new(ctx, UT_F32, 1, &noc), *all[] = {x, w, b};
    for (int i = 0; i < 3; i++) {
        for (int64_t k = 0; k < ut_nelem(all[i]); k++) ut_f32(all[i])[k] = 4.0f * unif(&s);
        ut_tensor_set_requires_grad(all[i], true);
    }
    int32_t tg[LN];
    for (int n = 0; n < LN; n++) tg[n] = (int32_t)(lcg(&s) >> 33) % LOC;
    ut_tensor *y = ut_linear(ctx, x, w, b);
    ut_tensor *loss = ut_cross_entropy(ctx, y, ut_tensor_from(ctx, UT_I32, 1, &nn, tg), -1);
    CHECK(loss && y->dtype == UT_BF16 && ut_backward(ctx, loss) == 0, "%s", ut_ctx_error(ctx));
    if (y) {
        memcpy(o->y, y->data, sizeof o->y);
        memcpy(o->dx, x->grad, sizeof o->dx), memcpy(o->dw, w->grad, sizeof o->dw), memcpy(o->db, b->grad, sizeof o->db);
    }
    o->scratch = ut_ctx_autocast_scratch_bytes(ctx);
    ut_ctx_free(ctx);
}

/* On one thread the blocked product gives the whole product's bits (blocks of
 * 48 rows, OpenBLAS's row tiles); its float32 scratch is a block, not the
 * output. On two threads it is deterministic and within rounding of it. */
static void test_linear_16bit_blocks(void) {
    static lin16 whole, blocked, again;
    int threads = omp_get_max_threads();
    ut_bf16_force_dnnl(0); /* the sgemm path: the property is OpenBLAS's */
    omp_set_num_threads(1);
    lin16_run(&whole);
    ut_cpu_lowp_block_set(48, 0);
    lin16_run(&blocked);
    CHECK(!memcmp(whole.y, blocked.y, sizeof whole.y), "output bits differ");
    CHECK(!memcmp(whole.dx, blocked.dx, sizeof whole.dx), "dx bits differ");
    CHECK(!memcmp(whole.dw, blocked.dw, sizeof whole.dw), "dw bits differ");
    CHECK(!memcmp(whole.db, blocked.db, sizeof whole.db), "db bits differ");
    size_t out32 = (size_t)LN * LOC * sizeof(float);
    CHECK(whole.scratch >= out32, "whole: scratch %zu bytes, output %zu in float32", whole.scratch, out32);
    size_t block32 = (size_t)48 * LOC * sizeof(float); /* the blocked run holds one block instead */
    CHECK(whole.scratch - blocked.scratch == out32 - block32, "scratch %zu bytes blocked, %zu whole", blocked.scratch,
          whole.scratch);
    omp_set_num_threads(2);
    lin16_run(&blocked);
    lin16_run(&again);
    CHECK(!memcmp(again.dw, blocked.dw, sizeof again.dw) && !memcmp(again.y, blocked.y, sizeof again.y),
          "two threads: not deterministic");
    CHECK(rel_err(blocked.dw, whole.dw, LOC * LC) < 1e-6 && rel_err(blocked.dx, whole.dx, LN * LC) < 1e-6,
          "two threads: dw %g, dx %g from one thread's", rel_err(blocked.dw, whole.dw, LOC * LC),
          rel_err(blocked.dx, whole.dx, LN * LC));
    ut_cpu_lowp_block_set(192, 16 << 20);
    omp_set_num_threads(threads);
    ut_bf16_force_dnnl(-1);
}

/* bf16 attention saves its probabilities in 16 bits and computes them a row
 * at a time in float32: the conversion scratch is what attention takes (the
 * op that takes most): the rounded qkv, its output (forward) or the output's
 * gradient (backward) in float32, and one row of T floats per thread, not a
 * float32 copy of the (B, NH, T, T) probabilities. */
static void test_attention_16bit_rows(void) {
    enum { B = 2, T = 64, C = 32, NH = 2 };
    ut_ctx *ctx = ut_ctx_new(NULL);
    ut_ctx_set_autocast(ctx, UT_BF16);
    int64_t ne[3] = {B, T, 3 * C};
    ut_tensor *qkv = ut_tensor_new(ctx, UT_F32, 3, ne);
    uint64_t s = 3;
    for (int64_t k = 0; k < ut_nelem(qkv); k++) ut_f32(qkv)[k] = unif(&s);
    ut_tensor_set_requires_grad(qkv, true);
    ut_tensor *y = ut_attention(ctx, qkv, NH);
    CHECK(y && ut_backward(ctx, ut_sum(ctx, y)) == 0, "%s", ut_ctx_error(ctx));
    size_t f = sizeof(float), want = (size_t)B * T * 3 * C * f + (size_t)B * T * C * f +
                                       (size_t)omp_get_max_threads() * T * f;
    CHECK(ut_ctx_autocast_scratch_bytes(ctx) == want, "scratch %zu bytes, want %zu (probabilities: %zu in float32)",
          ut_ctx_autocast_scratch_bytes(ctx), want, (size_t)B * NH * T * T * f);
    ut_ctx_free(ctx);
}

int main(void) {
    RUN(test_bf16_reference);
    RUN(test_f16_reference);
    RUN(test_all_values_round_trip);
    RUN(test_vector_matches_scalar);
    RUN(test_tensor_to);
    RUN(test_autocast_ops);
    RUN(test_autocast_off_is_fp32);
    RUN(test_bf16_halves_activations);
    RUN(test_model_forward_loss);
    RUN(test_cross_entropy_16bit_logits);
    RUN(test_linear_16bit_blocks);
    RUN(test_attention_16bit_rows);
    return TEST_SUMMARY();
}
