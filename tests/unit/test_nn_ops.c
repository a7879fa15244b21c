/* Forward values of layernorm, rms_norm (and its gradients), embedding, conv2d, max_pool2d and
 * attention (fused, masked, packed) against naive computations written here, and their error messages. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "test.h"
#include "utrain/base.h"
#include "utrain/nn.h"
#include "utrain/ops.h"

static ut_ctx *new_ctx(void) {
    ut_ctx_opts o = {.arena_bytes = 1 << 22, .seed = 7};
    return ut_ctx_new(&o);
}

static ut_tensor *randn(ut_ctx *ctx, ut_rng *r, int ndim, const int64_t *ne) {
    ut_tensor *t = ut_tensor_new(ctx, UT_F32, ndim, ne);
    float *x = ut_f32(t);
    for (int64_t i = 0; i < ut_nelem(t); i++) x[i] = ut_rng_normal(r);
    return t;
}

static double max_abs_diff(const float *a, const double *b, int64_t n) {
    double m = 0;
    for (int64_t i = 0; i < n; i++) m = fmax(m, fabs((double)a[i] - b[i]));
    return m;
}

/* ---- layernorm ---- */
static void test_layernorm_normalises_rows(void) {
    ut_ctx *ctx = new_ctx();
    ut_rng r;
    ut_rng_seed(&r, 1);
    int64_t N = 6, C = 37, xne[2] = {N, C};
    ut_tensor *x = randn(ctx, &r, 2, xne);
    for (int64_t i = 0; i < N * C; i++) ut_f32(x)[i] = 3.0f * ut_f32(x)[i] + 5.0f; /* shifted */
    ut_tensor *w = ut_tensor_new(ctx, UT_F32, 1, &C), *b = ut_tensor_new(ctx, UT_F32, 1, &C);
    for (int64_t c = 0; c < C; c++) {
        ut_f32(w)[c] = 1.0f;
        ut_f32(b)[c] = 0.0f;
    }
    ut_tensor *y = ut_layernorm(ctx, x, w, b, 1e-5f);
    CHECK(y != NULL, "%s", ut_ctx_error(ctx));
    for (int64_t n = 0; y && n < N; n++) {
        double m = 0, v = 0;
        for (int64_t c = 0; c < C; c++) m += ut_f32(y)[n * C + c];
        m /= (double)C;
        for (int64_t c = 0; c < C; c++) v += pow(ut_f32(y)[n * C + c] - m, 2);
        v /= (double)C; /* biased, as torch */
        CHECK_NEAR(m, 0.0, 1e-5);
        CHECK_NEAR(v, 1.0, 1e-3);
    }
    /* affine: y2 = y * w + b */
    for (int64_t c = 0; c < C; c++) {
        ut_f32(w)[c] = 0.5f + 0.1f * (float)c;
        ut_f32(b)[c] = -1.0f + 0.05f * (float)c;
    }
    ut_tensor *y2 = ut_layernorm(ctx, x, w, b, 1e-5f);
    CHECK(y2 != NULL, "%s", ut_ctx_error(ctx));
    for (int64_t i = 0; y && y2 && i < N * C; i++)
        CHECK_NEAR(ut_f32(y2)[i], ut_f32(y)[i] * ut_f32(w)[i % C] + ut_f32(b)[i % C], 1e-5);
    ut_ctx_free(ctx);
}

/* ---- rms_norm ---- */
/* max over the row of |a - b|, over the row's max |b| */
static double row_rel_err(const float *a, const double *b, int64_t C) {
    double m = 0, e = max_abs_diff(a, b, C);
    for (int64_t c = 0; c < C; c++) m = fmax(m, fabs(b[c]));
    return e / (m > 0 ? m : 1);
}

/* y = w * x * r, r = 1 / sqrt(mean(x^2) + eps), and the gradients of
 * L = sum(y * R) (dx = r * (R w - x r^2 mean(R w x)), dw = sum over rows of
 * R x r), all in double here, on (2, 3, C) rows: shifted rows (no mean is
 * subtracted) and a row of small values whose mean square is eps's size. */
static void test_rms_norm_values(void) {
    ut_ctx *ctx = new_ctx();
    ut_rng rg;
    ut_rng_seed(&rg, 3);
    enum { N = 6, C = 37 };
    const float eps = 1e-6f;
    int64_t xne[3] = {2, 3, C}, cne = C;
    ut_tensor *x = randn(ctx, &rg, 3, xne), *w = randn(ctx, &rg, 1, &cne), *R = randn(ctx, &rg, 3, xne);
    float *xv = ut_f32(x), *wv = ut_f32(w), *Rv = ut_f32(R);
    for (int64_t c = 0; c < C; c++) {
        xv[1 * C + c] += 4.0f;       /* a large mean */
        xv[2 * C + c] = 2.0f * xv[2 * C + c] - 3.0f;
        xv[4 * C + c] *= 1e-3f;      /* mean(x^2) ~ eps */
    }
    ut_tensor_set_requires_grad(x, true);
    ut_tensor_set_requires_grad(w, true);
    ut_tensor *y = ut_rms_norm(ctx, x, w, eps);
    CHECK(y != NULL, "%s", ut_ctx_error(ctx));
    if (!y) {
        ut_ctx_free(ctx);
        return;
    }
    CHECK(y->ndim == 3 && y->ne[0] == 2 && y->ne[1] == 3 && y->ne[2] == C && y->dtype == UT_F32, "shape");
    int rc = ut_backward(ctx, ut_sum(ctx, ut_mul(ctx, y, R)));
    CHECK(rc == 0, "%s", ut_ctx_error(ctx));
    double dw[C] = {0};
    for (int64_t n = 0; n < N; n++) {
        const float *xr = xv + n * C, *g = Rv + n * C;
        double ss = 0, sdnx = 0, yr[C], dxr[C];
        for (int64_t c = 0; c < C; c++) ss += (double)xr[c] * xr[c];
        double r = 1.0 / sqrt(ss / C + eps);
        for (int64_t c = 0; c < C; c++) {
            yr[c] = (double)wv[c] * xr[c] * r;
            sdnx += (double)g[c] * wv[c] * xr[c];
            dw[c] += (double)g[c] * xr[c] * r;
        }
        for (int64_t c = 0; c < C; c++) dxr[c] = r * ((double)g[c] * wv[c] - xr[c] * r * r * sdnx / C);
        double ey = row_rel_err(ut_f32(y) + n * C, yr, C), ex = rc ? 1 : row_rel_err(x->grad + n * C, dxr, C);
        CHECK(ey < 1e-5 && ex < 1e-5, "row %lld: output error %.3g, input gradient error %.3g", (long long)n, ey, ex);
    }
    double ew = rc ? 1 : row_rel_err(w->grad, dw, C);
    CHECK(ew < 1e-5, "weight gradient error %.3g", ew);
    ut_ctx_free(ctx);
}

static void test_rms_norm_bad_inputs(void) {
    static const struct { int64_t xc, wc; int wdim; float eps; const char *want; } cases[] = {
        {5, 6, 1, 1e-6f, "expected x (..., C), weight (C)"},
        {5, 5, 2, 1e-6f, "expected x (..., C), weight (C)"},
        {5, 5, 1, -1.0f, "eps -1 must be >= 0"},
        {5, 5, 1, NAN, "must be >= 0"},
    };
    for (size_t k = 0; k < sizeof cases / sizeof *cases; k++) {
        ut_ctx *ctx = new_ctx();
        int64_t xne[2] = {3, cases[k].xc}, wne[2] = {1, cases[k].wc};
        ut_tensor *w = ut_tensor_zeros(ctx, UT_F32, cases[k].wdim, wne + 2 - cases[k].wdim);
        ut_tensor *y = ut_rms_norm(ctx, ut_tensor_zeros(ctx, UT_F32, 2, xne), w, cases[k].eps);
        const char *e = ut_ctx_error(ctx);
        CHECK(!y && e && strstr(e, "rms_norm") && strstr(e, cases[k].want), "case %zu: %s", k,
              e ? e : "(accepted)");
        ut_ctx_free(ctx);
    }
}

/* ---- embedding ---- */
static void test_embedding_values(void) {
    ut_ctx *ctx = new_ctx();
    int64_t tne[2] = {4, 3}, ine[2] = {2, 3};
    float table[12];
    for (int i = 0; i < 12; i++) table[i] = (float)i;
    int32_t idx[6] = {3, 0, 3, 1, 2, 0};
    ut_tensor *y = ut_embedding(ctx, ut_tensor_from(ctx, UT_I32, 2, ine, idx),
                                ut_tensor_from(ctx, UT_F32, 2, tne, table));
    CHECK(y != NULL, "%s", ut_ctx_error(ctx));
    if (y) {
        CHECK(y->ndim == 3 && y->ne[0] == 2 && y->ne[1] == 3 && y->ne[2] == 3, "shape");
        for (int n = 0; n < 6; n++)
            for (int c = 0; c < 3; c++) CHECK_NEAR(ut_f32(y)[n * 3 + c], idx[n] * 3 + c, 0);
    }
    ut_ctx_free(ctx);
}

/* padding_idx: the row is read as any other but its gradient stays 0; the
 * other rows get the sum of their positions' output gradients (2 y) */
static void test_embedding_padding_idx(void) {
    ut_ctx *ctx = new_ctx();
    int64_t tne[2] = {4, 2}, ine[1] = {5};
    float table[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    int32_t idx[5] = {1, 3, 1, 0, 1};
    ut_tensor *w = ut_tensor_from(ctx, UT_F32, 2, tne, table);
    ut_tensor_set_requires_grad(w, true);
    ut_tensor *y = ut_embedding_pad(ctx, ut_tensor_from(ctx, UT_I32, 1, ine, idx), w, 1);
    CHECK(y != NULL && ut_f32(y)[0] == 3 && ut_f32(y)[5] == 4, "pad row looked up: %s", ut_ctx_error(ctx));
    int rc = ut_backward(ctx, ut_sum(ctx, ut_mul(ctx, y, y)));
    CHECK(rc == 0, "%s", ut_ctx_error(ctx));
    if (rc == 0) {
        float want[8] = {2, 4, 0, 0, 0, 0, 14, 16};
        for (int i = 0; i < 8; i++) CHECK_NEAR(w->grad[i], want[i], 0);
    }
    ut_ctx_free(ctx);
}

static void test_embedding_bad_index(void) {
    int32_t bad[2][4] = {{0, 1, 7, 2}, {0, -1, 1, 1}};
    for (int k = 0; k < 2; k++) {
        ut_ctx *ctx = new_ctx();
        int64_t tne[2] = {4, 2}, ine[2] = {2, 2};
        ut_tensor *table = ut_tensor_zeros(ctx, UT_F32, 2, tne);
        ut_tensor *idx = ut_tensor_from(ctx, UT_I32, 2, ine, bad[k]);
        ut_tensor *y = ut_embedding(ctx, idx, table);
        const char *e = ut_ctx_error(ctx);
        CHECK(y == NULL, "bad index accepted");
        CHECK(e && strstr(e, "embedding"), "error: %s", e ? e : "(none)");
        CHECK(e && strstr(e, k ? "index -1" : "index 7"), "error does not name the value: %s", e ? e : "");
        CHECK(e && strstr(e, k ? "[0, 1]" : "[1, 0]"), "error does not name the place: %s",
              e ? e : "");
        ut_ctx_free(ctx);
    }
}

/* ---- conv2d ---- */
static void naive_conv(double *out, const float *x, const float *w, const float *b, int B, int C,
                       int H, int W, int OC, int KH, int KW, int S, int P, int OH, int OW) {
    for (int n = 0; n < B; n++)
        for (int o = 0; o < OC; o++)
            for (int oh = 0; oh < OH; oh++)
                for (int ow = 0; ow < OW; ow++) {
                    double s = b ? b[o] : 0.0;
                    for (int c = 0; c < C; c++)
                        for (int kh = 0; kh < KH; kh++)
                            for (int kw = 0; kw < KW; kw++) {
                                int ih = oh * S - P + kh, iw = ow * S - P + kw;
                                if (ih < 0 || ih >= H || iw < 0 || iw >= W) continue;
                                s += (double)x[((n * C + c) * H + ih) * W + iw] *
                                     w[((o * C + c) * KH + kh) * KW + kw];
                            }
                    out[((n * OC + o) * OH + oh) * OW + ow] = s;
                }
}

static void check_conv(int B, int C, int H, int W, int OC, int KH, int KW, int S, int P, bool bias) {
    ut_ctx *ctx = new_ctx();
    ut_rng r;
    ut_rng_seed(&r, (uint64_t)(B * 1000 + C * 100 + S * 10 + P));
    int64_t xne[4] = {B, C, H, W}, wne[4] = {OC, C, KH, KW}, bne[1] = {OC};
    ut_tensor *x = randn(ctx, &r, 4, xne), *w = randn(ctx, &r, 4, wne);
    ut_tensor *b = bias ? randn(ctx, &r, 1, bne) : NULL;
    ut_tensor *y = ut_conv2d(ctx, x, w, b, S, P);
    int OH = (H + 2 * P - KH) / S + 1, OW = (W + 2 * P - KW) / S + 1;
    CHECK(y != NULL, "%s", ut_ctx_error(ctx));
    if (y) {
        CHECK(y->ne[0] == B && y->ne[1] == OC && y->ne[2] == OH && y->ne[3] == OW,
              "shape %lld %lld", (long long)y->ne[2], (long long)y->ne[3]);
        double *ref = malloc(sizeof(double) * (size_t)(B * OC * OH * OW));
        naive_conv(ref, ut_f32(x), ut_f32(w), b ? ut_f32(b) : NULL, B, C, H, W, OC, KH, KW, S, P,
                   OH, OW);
        double err = max_abs_diff(ut_f32(y), ref, (int64_t)B * OC * OH * OW);
        CHECK(err < 1e-4 * sqrt((double)(C * KH * KW)) + 1e-5,
              "B%d C%d %dx%d OC%d k%dx%d s%d p%d bias%d: max err %g", B, C, H, W, OC, KH, KW, S,
              P, bias, err);
        /* Winograd's error, measured (standard normal inputs): 2.1e-5 on the
         * CNN's second layer (K = 288, outputs of size ~17), 5e-6 at K = 72-99;
         * bounded at 4e-6 sqrt(K), about 3 times what it gives */
        if (KH == 3 && KW == 3 && S == 1 && C >= 8 && OC >= 8)
            CHECK(err < 4e-6 * sqrt((double)(C * KH * KW)), "Winograd B%d C%d %dx%d OC%d p%d: max err %g", B, C, H, W,
                  OC, P, err);
        free(ref);
    }
    ut_ctx_free(ctx);
}

static void test_conv2d_matches_naive(void) {
    check_conv(2, 3, 7, 6, 4, 3, 3, 1, 0, true);
    check_conv(2, 3, 7, 6, 4, 3, 3, 1, 1, false);
    check_conv(3, 2, 8, 9, 5, 3, 3, 2, 1, true);
    check_conv(1, 4, 6, 6, 2, 2, 3, 2, 0, false);
    check_conv(2, 1, 5, 5, 3, 5, 5, 1, 2, true);
    check_conv(3, 2, 5, 5, 3, 1, 1, 1, 0, true);
    /* stride 1 with padding wider than the input: empty valid spans */
    check_conv(2, 3, 3, 1, 2, 5, 3, 1, 2, true);
    check_conv(1, 2, 2, 3, 3, 4, 4, 1, 3, false);
    check_conv(2, 3, 9, 11, 4, 3, 5, 1, 1, true);
    /* stride 3 stays on the general path */
    check_conv(2, 2, 10, 11, 3, 3, 3, 3, 1, true);
    /* a batch larger than the thread count and the dw chunk count */
    if (test_quick()) check_conv(20, 4, 10, 10, 8, 3, 3, 1, 1, true);
    else check_conv(40, 8, 14, 14, 16, 3, 3, 1, 0, true);
    /* 3x3 stride 1 with 8 channels or more: Winograd F(2x2, 3x3) (cpu/winograd.c),
     * odd outputs (the last tiles cut), padding 0 to 2, groups of images
     * that do not fill the last product, and the CNN's second layer */
    check_conv(3, 8, 7, 6, 9, 3, 3, 1, 0, true);
    check_conv(5, 8, 8, 9, 8, 3, 3, 1, 1, false);
    check_conv(2, 11, 4, 5, 12, 3, 3, 1, 2, true);
    check_conv(6, 32, 26, 26, 64, 3, 3, 1, 0, true);
    /* an image of several blocks of tile rows (the last one shorter) */
    check_conv(2, 32, 37, 37, 32, 3, 3, 1, 1, true);
    /* the products on OpenBLAS where libxsmm has no kernel (UTRAIN_SMALL_GEMM=blas) */
    setenv("UTRAIN_SMALL_GEMM", "blas", 1);
    check_conv(3, 8, 7, 6, 9, 3, 3, 1, 0, true);
    check_conv(2, 32, 37, 37, 32, 3, 3, 1, 1, true);
    unsetenv("UTRAIN_SMALL_GEMM");
}

/* dw and dx of a large batch are bitwise the same on a second run */
static void test_conv2d_backward_deterministic(void) {
    float *first[2] = {NULL, NULL};
    for (int run = 0; run < 2; run++) {
        ut_ctx *ctx = new_ctx();
        ut_rng r;
        ut_rng_seed(&r, 5);
        int64_t xne[4] = {37, 3, 9, 9}, wne[4] = {6, 3, 3, 3};
        ut_tensor *x = randn(ctx, &r, 4, xne), *w = randn(ctx, &r, 4, wne);
        ut_tensor_set_requires_grad(x, true);
        ut_tensor_set_requires_grad(w, true);
        ut_tensor *y = ut_conv2d(ctx, x, w, NULL, 1, 1);
        int rc = ut_backward(ctx, ut_sum(ctx, ut_mul(ctx, y, y)));
        CHECK(rc == 0, "%s", ut_ctx_error(ctx));
        if (rc == 0) {
            float *g[2] = {x->grad, w->grad};
            int64_t n[2] = {ut_nelem(x), ut_nelem(w)};
            for (int k = 0; k < 2; k++) {
                if (run == 0) {
                    first[k] = malloc(sizeof(float) * (size_t)n[k]);
                    memcpy(first[k], g[k], sizeof(float) * (size_t)n[k]);
                } else if (first[k]) {
                    CHECK(memcmp(first[k], g[k], sizeof(float) * (size_t)n[k]) == 0,
                          "gradient %d differs between runs", k);
                }
            }
        }
        ut_ctx_free(ctx);
    }
    free(first[0]);
    free(first[1]);
}

/* ut_conv2d_relu gives relu(conv2d)'s output and gradients bit for bit, and
 * ut_conv2d_relu_maxpool2 max_pool2d(relu(conv2d), 2, 2)'s (the bias
 * gradient up to rounding), on im2col (one
 * input channel, as the CNN's first layer) and on Winograd (padding 0 and
 * 1, odd sizes: a last row or column that no window takes); under autocast
 * they are the separate ops */
/* a malloc'd copy of t's float32 gradient, its length in *n */
static float *grad_copy(const ut_tensor *t, int64_t *n) {
    *n = ut_nelem(t);
    float *g = malloc(sizeof(float) * (size_t)*n);
    memcpy(g, t->grad, sizeof(float) * (size_t)*n);
    return g;
}

typedef struct { float *y, *g[3]; int64_t n[4]; } conv_relu_run;

static conv_relu_run conv_relu_once(bool fused, bool pool, int64_t B, int64_t C, int64_t H, int64_t W, int64_t OC,
                                    int P) {
    ut_ctx *ctx = new_ctx();
    ut_rng r;
    ut_rng_seed(&r, 21);
    int64_t xne[4] = {B, C, H, W}, wne[4] = {OC, C, 3, 3};
    ut_tensor *x = randn(ctx, &r, 4, xne), *w = randn(ctx, &r, 4, wne), *b = randn(ctx, &r, 1, &OC);
    ut_tensor *in[3] = {x, w, b};
    for (int i = 0; i < 3; i++) ut_tensor_set_requires_grad(in[i], true);
    ut_tensor *y = fused ? ut_conv2d_relu(ctx, x, w, b, 1, P) : ut_relu(ctx, ut_conv2d(ctx, x, w, b, 1, P));
    if (pool) y = fused ? ut_conv2d_relu_maxpool2(ctx, x, w, b, 1, P) : ut_max_pool2d(ctx, y, 2, 2);
    conv_relu_run o = {0};
    CHECK(y != NULL, "%s", ut_ctx_error(ctx));
    if (!y) goto out;
    const char *want = fused ? "conv2d" : pool ? "max_pool2d" : "relu";
    CHECK(!strcmp(ut_op_name(y->op), want), "op %s", ut_op_name(y->op));
    ut_tensor *wy = randn(ctx, &r, 4, y->ne);
    CHECK(ut_backward(ctx, ut_sum(ctx, ut_mul(ctx, y, wy))) == 0, "%s", ut_ctx_error(ctx));
    o.n[3] = ut_nelem(y);
    o.y = malloc(sizeof(float) * (size_t)o.n[3]);
    memcpy(o.y, ut_f32(y), sizeof(float) * (size_t)o.n[3]);
    for (int i = 0; i < 3; i++) {
        o.g[i] = grad_copy(in[i], &o.n[i]);
    }
out:
    ut_ctx_free(ctx);
    return o;
}

static void test_conv2d_relu_fused(void) {
    /* B, C, H, W, OC, padding; the last two: even outputs (every tile a
     * window), in one block and in five blocks of tile rows */
    const int64_t shapes[][6] = {{5, 1, 12, 13, 8, 0}, {3, 16, 14, 15, 16, 0}, {2, 8, 9, 10, 12, 1},
                                 {2, 16, 10, 12, 8, 0}, {1, 32, 38, 38, 32, 0}};
    for (size_t s = 0; s < 2 * sizeof shapes / sizeof shapes[0]; s++) {
        const int64_t *q = shapes[s / 2];
        bool pool = s % 2;
        conv_relu_run a = conv_relu_once(false, pool, q[0], q[1], q[2], q[3], q[4], (int)q[5]);
        conv_relu_run f = conv_relu_once(true, pool, q[0], q[1], q[2], q[3], q[4], (int)q[5]);
        if (a.y && f.y) {
            int64_t zeros = 0;
            for (int64_t i = 0; i < a.n[3]; i++) zeros += a.y[i] == 0.0f;
            /* about half the outputs clamped; pooled, about a sixteenth (all four of a window) */
            int64_t lo = pool ? a.n[3] / 40 : a.n[3] / 4, hi = pool ? a.n[3] / 4 : 3 * a.n[3] / 4;
            CHECK(zeros > lo && zeros < hi, "case %zu: %lld of %lld outputs clamped", s, (long long)zeros,
                  (long long)a.n[3]);
            CHECK(!memcmp(a.y, f.y, sizeof(float) * (size_t)a.n[3]), "case %zu: outputs differ", s);
            /* pooled, the bias gradient sums each window's share once rather than
             * its four places (three of them zeros): equal up to rounding */
            for (int i = 0; i < (pool ? 2 : 3); i++)
                CHECK(!memcmp(a.g[i], f.g[i], sizeof(float) * (size_t)a.n[i]), "case %zu: gradient %d differs", s, i);
            for (int64_t j = 0; pool && j < a.n[2]; j++)
                CHECK_NEAR(f.g[2][j], a.g[2][j], 1e-5 * (1 + fabs(a.g[2][j])));
        }
        free(a.y), free(f.y);
        for (int i = 0; i < 3; i++) free(a.g[i]), free(f.g[i]);
    }
    /* under autocast: a conv2d and a relu */
    ut_ctx *ctx = new_ctx();
    ut_ctx_set_autocast(ctx, UT_BF16);
    int64_t xne[4] = {1, 8, 6, 6}, wne[4] = {8, 8, 3, 3};
    ut_tensor *y = ut_conv2d_relu(ctx, ut_tensor_zeros(ctx, UT_F32, 4, xne), ut_tensor_zeros(ctx, UT_F32, 4, wne), NULL, 1, 1);
    CHECK(y && !strcmp(ut_op_name(y->op), "relu"), "autocast: %s", y ? ut_op_name(y->op) : ut_ctx_error(ctx));
    y = ut_conv2d_relu_maxpool2(ctx, ut_tensor_zeros(ctx, UT_F32, 4, xne), ut_tensor_zeros(ctx, UT_F32, 4, wne), NULL, 1, 1);
    CHECK(y && !strcmp(ut_op_name(y->op), "max_pool2d") && y->ne[2] == 3, "autocast: %s",
          y ? ut_op_name(y->op) : ut_ctx_error(ctx));
    ut_ctx_free(ctx);
}

/* ut_linear_gelu gives gelu(linear)'s output and gradients bit for bit on
 * the CPU, in float32 and under bf16 and fp16 autocast (a 16-bit output's
 * pre-activation rounded as the separate linear's output is), with and
 * without a bias, in one of GELU's blocks and in several (2^18 elements a
 * block) with the 16-bit product's row blocks (ut_cpu_lowp_block_set);
 * without gradients it runs in place, the same values. UT_LINEAR_GELU=0
 * makes it the two ops; another value is refused. */
void ut_cpu_lowp_block_set(int64_t rows, int64_t min_bytes);

typedef struct { void *y; float *g[3]; int64_t n[4]; size_t ybytes; } lin_gelu_run;

static lin_gelu_run linear_gelu_once(bool fused, ut_dtype ac, int64_t N, int64_t C, int64_t OC, bool bias,
                                     bool grad) {
    if (!fused) setenv("UT_LINEAR_GELU", "0", 1);
    ut_ctx *ctx = new_ctx();
    unsetenv("UT_LINEAR_GELU");
    ut_ctx_set_autocast(ctx, ac);
    ut_ctx_set_grad_enabled(ctx, grad);
    ut_rng r;
    ut_rng_seed(&r, 33);
    int64_t xne[2] = {N, C}, wne[2] = {OC, C};
    ut_tensor *x = randn(ctx, &r, 2, xne), *w = randn(ctx, &r, 2, wne), *b = randn(ctx, &r, 1, &OC);
    ut_tensor *in[3] = {x, w, b};
    for (int i = 0; i < 3; i++) ut_tensor_set_requires_grad(in[i], true);
    ut_tensor *y = ut_linear_gelu(ctx, x, w, bias ? b : NULL);
    lin_gelu_run o = {0};
    CHECK(y != NULL, "%s", ut_ctx_error(ctx));
    if (!y) goto out;
    CHECK(!strcmp(ut_op_name(y->op), fused ? "linear" : "gelu"), "op %s", ut_op_name(y->op));
    CHECK(y->dtype == ac, "output dtype %d, autocast %d", (int)y->dtype, (int)ac);
    if (grad) {
        ut_tensor *wy = randn(ctx, &r, 2, y->ne);
        CHECK(ut_backward(ctx, ut_sum(ctx, ut_mul(ctx, y, wy))) == 0, "%s", ut_ctx_error(ctx));
        for (int i = 0; i < (bias ? 3 : 2); i++) {
            o.g[i] = grad_copy(in[i], &o.n[i]);
        }
    }
    o.n[3] = ut_nelem(y);
    o.ybytes = (size_t)o.n[3] * ut_dtype_size(y->dtype);
    o.y = malloc(o.ybytes);
    memcpy(o.y, y->data, o.ybytes);
out:
    ut_ctx_free(ctx);
    return o;
}

static void test_linear_gelu_fused(void) {
    /* N, C, OC: one GELU block; several (3 x 2^18 + a part), the 16-bit
     * product in 48-row blocks */
    const int64_t shapes[][3] = {{13, 24, 40}, {1000, 16, 800}};
    const ut_dtype dts[3] = {UT_F32, UT_BF16, UT_F16};
    for (int s = 0; s < 2; s++)
        for (int d = 0; d < 3; d++)
            for (int v = 0; v < 3; v++) { /* with bias; without; no gradients */
                const int64_t *q = shapes[s];
                bool bias = v != 1, grad = v != 2;
                if (s == 1) ut_cpu_lowp_block_set(48, 0);
                lin_gelu_run a = linear_gelu_once(false, dts[d], q[0], q[1], q[2], bias, grad);
                lin_gelu_run f = linear_gelu_once(true, dts[d], q[0], q[1], q[2], bias, grad);
                if (s == 1) ut_cpu_lowp_block_set(192, 16 << 20);
                if (a.y && f.y) {
                    int64_t neg = 0;
                    for (int64_t i = 0; dts[d] == UT_F32 && i < a.n[3]; i++) neg += ((float *)a.y)[i] < 0.0f;
                    CHECK(dts[d] != UT_F32 || (neg > a.n[3] / 4 && neg < 3 * a.n[3] / 4),
                          "shape %d: %lld of %lld outputs negative", s, (long long)neg, (long long)a.n[3]);
                    CHECK(a.ybytes == f.ybytes && !memcmp(a.y, f.y, a.ybytes), "shape %d dtype %d case %d: outputs differ",
                          s, (int)dts[d], v);
                    for (int i = 0; grad && i < (bias ? 3 : 2); i++)
                        CHECK(a.g[i] && f.g[i] && !memcmp(a.g[i], f.g[i], sizeof(float) * (size_t)a.n[i]),
                              "shape %d dtype %d case %d: gradient %d differs", s, (int)dts[d], v, i);
                }
                free(a.y), free(f.y);
                for (int i = 0; i < 3; i++) free(a.g[i]), free(f.g[i]);
            }
    setenv("UT_LINEAR_GELU", "2", 1);
    ut_ctx *ctx = new_ctx();
    unsetenv("UT_LINEAR_GELU");
    const char *e = ut_ctx_error(ctx);
    CHECK(e && strstr(e, "UT_LINEAR_GELU=2"), "a bad UT_LINEAR_GELU: %s", e ? e : "(no error)");
    ut_ctx_free(ctx);
}

/* ut_linear_cross_entropy against ut_linear then ut_cross_entropy: the same
 * loss and gradients to the bit, float32 and both autocasts, the 16-bit
 * product in blocks or whole. Targets from [0, V) with every seventh
 * ignored; case 1 without a bias and with label smoothing; case 2 without
 * gradients. */
typedef struct { float loss; float *g[3]; int64_t n[3]; } lin_ce_run;

static lin_ce_run linear_ce_once(bool fused, ut_dtype ac, int64_t N, int64_t C, int64_t V, int v) {
    if (!fused) setenv("UT_LINEAR_CE", "0", 1);
    ut_ctx *ctx = new_ctx();
    unsetenv("UT_LINEAR_CE");
    bool bias = v != 1, grad = v != 2;
    ut_ctx_set_autocast(ctx, ac);
    ut_ctx_set_grad_enabled(ctx, grad);
    if (v == 1) ut_ctx_set_label_smoothing(ctx, 0.1f);
    ut_rng r;
    ut_rng_seed(&r, 34);
    int64_t xne[2] = {N, C}, wne[2] = {V, C};
    ut_tensor *x = randn(ctx, &r, 2, xne), *w = randn(ctx, &r, 2, wne), *b = randn(ctx, &r, 1, &V);
    int32_t *tg = malloc(sizeof(int32_t) * (size_t)N);
    for (int64_t i = 0; i < N; i++) tg[i] = i % 7 == 3 ? -100 : (int32_t)((i * 2654435761u) % (uint64_t)V);
    ut_tensor *t = ut_tensor_from(ctx, UT_I32, 1, &N, tg);
    free(tg);
    ut_tensor *in[3] = {x, w, b};
    for (int i = 0; i < 3; i++) ut_tensor_set_requires_grad(in[i], true);
    ut_tensor *loss = ut_linear_cross_entropy(ctx, x, w, bias ? b : NULL, t, -100);
    lin_ce_run o = {0};
    CHECK(loss != NULL, "%s", ut_ctx_error(ctx));
    if (!loss) goto out;
    CHECK(!strcmp(ut_op_name(loss->op), fused ? "linear_ce" : "cross_entropy"), "op %s", ut_op_name(loss->op));
    CHECK(loss->dtype == UT_F32 && ut_nelem(loss) == 1, "loss dtype %d", (int)loss->dtype);
    o.loss = ut_f32(loss)[0];
    if (grad) { /* a loss gradient other than 1 */
        CHECK(ut_backward(ctx, ut_scale(ctx, loss, 0.75f)) == 0, "%s", ut_ctx_error(ctx));
        for (int i = 0; i < (bias ? 3 : 2); i++) {
            o.g[i] = grad_copy(in[i], &o.n[i]);
        }
    }
out:
    ut_ctx_free(ctx);
    return o;
}

static void test_linear_ce_fused(void) {
    const int64_t shapes[][3] = {{13, 24, 40}, {1000, 16, 800}}; /* N, C, V */
    const ut_dtype dts[3] = {UT_F32, UT_BF16, UT_F16};
    for (int s = 0; s < 2; s++)
        for (int d = 0; d < 3; d++)
            for (int v = 0; v < 3; v++) {
                const int64_t *q = shapes[s];
                if (s == 1) ut_cpu_lowp_block_set(48, 0);
                lin_ce_run a = linear_ce_once(false, dts[d], q[0], q[1], q[2], v);
                lin_ce_run f = linear_ce_once(true, dts[d], q[0], q[1], q[2], v);
                if (s == 1) ut_cpu_lowp_block_set(192, 16 << 20);
                CHECK(a.loss > 1.0f && memcmp(&a.loss, &f.loss, sizeof(float)) == 0,
                      "shape %d dtype %d case %d: loss %.9g fused %.9g", s, (int)dts[d], v, (double)a.loss,
                      (double)f.loss);
                for (int i = 0; v != 2 && i < (v == 1 ? 2 : 3); i++) {
                    bool nz = false;
                    for (int64_t j = 0; a.g[i] && j < a.n[i]; j++) nz |= a.g[i][j] != 0.0f;
                    CHECK(nz && f.g[i] && !memcmp(a.g[i], f.g[i], sizeof(float) * (size_t)a.n[i]),
                          "shape %d dtype %d case %d: gradient %d differs", s, (int)dts[d], v, i);
                }
                for (int i = 0; i < 3; i++) free(a.g[i]), free(f.g[i]);
            }
    /* refusals: a target outside [0, V), targets of another shape, a bad switch */
    ut_ctx *ctx = new_ctx();
    int64_t xne[2] = {3, 4}, wne[2] = {5, 4}, n3 = 3, n2 = 2;
    ut_tensor *x = ut_tensor_zeros(ctx, UT_F32, 2, xne), *w = ut_tensor_zeros(ctx, UT_F32, 2, wne);
    ut_tensor *bad = ut_tensor_from(ctx, UT_I32, 1, &n3, (int32_t[]){0, 5, 1});
    CHECK(ut_linear_cross_entropy(ctx, x, w, NULL, bad, -100) == NULL, "target 5 of 5 classes accepted");
    const char *e = ut_ctx_error(ctx);
    CHECK(e && strstr(e, "linear_cross_entropy") && strstr(e, "target 5 at position 1"), "error: %s",
          e ? e : "(none)");
    ut_ctx_free(ctx);
    ctx = new_ctx();
    x = ut_tensor_zeros(ctx, UT_F32, 2, xne), w = ut_tensor_zeros(ctx, UT_F32, 2, wne);
    ut_tensor *short_t = ut_tensor_zeros(ctx, UT_I32, 1, &n2);
    CHECK(ut_linear_cross_entropy(ctx, x, w, NULL, short_t, -100) == NULL, "2 targets for 3 rows accepted");
    e = ut_ctx_error(ctx);
    CHECK(e && strstr(e, "linear_cross_entropy") && strstr(e, "leading dims"), "error: %s", e ? e : "(none)");
    ut_ctx_free(ctx);
    ctx = new_ctx();
    x = ut_tensor_zeros(ctx, UT_F32, 2, xne);
    ut_tensor *w3 = ut_tensor_zeros(ctx, UT_F32, 2, (int64_t[]){5, 3}), *t3 = ut_tensor_zeros(ctx, UT_I32, 1, &n3);
    CHECK(ut_linear_cross_entropy(ctx, x, w3, NULL, t3, -100) == NULL, "a weight of 3 columns for x of 4 accepted");
    e = ut_ctx_error(ctx);
    CHECK(e && strstr(e, "linear_cross_entropy") && strstr(e, "weight (V, C)"), "error: %s", e ? e : "(none)");
    ut_ctx_free(ctx);
    /* a seq2seq model's head and loss: targets (B, T) against the decoder's
     * states (B, T, C), as against the logits (B, T, V) */
    ut_kv *kv = ut_kv_new();
    ut_kv_set(kv, "vocab_size", "16"), ut_kv_set(kv, "d_model", "8"), ut_kv_set(kv, "d_kv", "4");
    ut_kv_set(kv, "d_ff", "16"), ut_kv_set(kv, "num_layers", "1"), ut_kv_set(kv, "num_heads", "2");
    char err[256] = "";
    ut_model *m = ut_model_create("t5", kv, 1, err, sizeof err);
    ut_kv_free(kv);
    CHECK(m != NULL, "t5: %s", err);
    for (int k = 0; m && k < 2; k++) {
        ctx = new_ctx();
        ut_tensor *h = ut_tensor_zeros(ctx, UT_F32, 3, (int64_t[]){2, 3, k ? 16 : 8});
        ut_tensor *tg = ut_tensor_zeros(ctx, UT_I32, 2, (int64_t[]){2, 4});
        ut_tensor *l = k ? ut_model_seq2seq_loss(m, ctx, h, tg) : ut_model_seq2seq_head_loss(m, ctx, h, m->params.t[0], NULL, tg);
        e = ut_ctx_error(ctx);
        CHECK(!l && e && strstr(e, "t5 seq2seq loss") && strstr(e, k ? "logits (B, T, V)" : "decoder's states (B, T, C)"),
              "targets (2, 4) for (2, 3, ...): %s", e ? e : "(none)");
        ut_ctx_free(ctx);
    }
    ut_model_free(m);
    setenv("UT_LINEAR_CE", "yes", 1);
    ctx = new_ctx();
    unsetenv("UT_LINEAR_CE");
    e = ut_ctx_error(ctx);
    CHECK(e && strstr(e, "UT_LINEAR_CE=yes"), "a bad UT_LINEAR_CE: %s", e ? e : "(no error)");
    ut_ctx_free(ctx);
}

static void test_conv2d_channel_mismatch(void) {
    ut_ctx *ctx = new_ctx();
    int64_t xne[4] = {1, 3, 5, 5}, wne[4] = {2, 4, 3, 3};
    ut_tensor *y = ut_conv2d(ctx, ut_tensor_zeros(ctx, UT_F32, 4, xne),
                             ut_tensor_zeros(ctx, UT_F32, 4, wne), NULL, 1, 0);
    const char *e = ut_ctx_error(ctx);
    CHECK(y == NULL, "mismatch accepted");
    CHECK(e && strstr(e, "conv2d") && strstr(e, "(1, 3, 5, 5)") && strstr(e, "(2, 4, 3, 3)"),
          "error: %s", e ? e : "(none)");
    ut_ctx_free(ctx);
}

/* ---- max_pool2d ---- */
static void test_max_pool2d_known(void) {
    ut_ctx *ctx = new_ctx();
    /* 1 x 1 x 4 x 5: the last column is dropped (floor mode) */
    float x[20] = {1, 2, 0, 4, 99,
                   3, 0, 7, 1, 99,
                   -1, -2, 5, 5, 99,
                   -3, -4, 5, 6, 99};
    int64_t ne[4] = {1, 1, 4, 5};
    ut_tensor *xt = ut_tensor_from(ctx, UT_F32, 4, ne, x);
    ut_tensor *y = ut_max_pool2d(ctx, xt, 2, 2);
    CHECK(y != NULL, "%s", ut_ctx_error(ctx));
    float want[4] = {3, 7, -1, 6};
    if (y) {
        CHECK(y->ne[2] == 2 && y->ne[3] == 2, "shape");
        for (int i = 0; i < 4; i++) CHECK_NEAR(ut_f32(y)[i], want[i], 0);
    }
    /* overlapping 3x3 windows, stride 1 */
    ut_tensor *y3 = ut_max_pool2d(ctx, xt, 3, 1);
    float want3[6] = {7, 7, 99, 7, 7, 99};
    if (y3) {
        CHECK(y3->ne[2] == 2 && y3->ne[3] == 3, "shape");
        for (int i = 0; i < 6; i++) CHECK_NEAR(ut_f32(y3)[i], want3[i], 0);
    }
    ut_ctx_free(ctx);
}

/* ties: the gradient goes to the first max in the window, as in torch */
static void test_max_pool2d_ties(void) {
    ut_ctx *ctx = new_ctx();
    int64_t ne[4] = {1, 1, 4, 4};
    ut_tensor *x = ut_tensor_zeros(ctx, UT_F32, 4, ne);
    ut_tensor_set_requires_grad(x, true);
    int rc = ut_backward(ctx, ut_sum(ctx, ut_max_pool2d(ctx, x, 2, 2)));
    CHECK(rc == 0, "%s", ut_ctx_error(ctx));
    for (int i = 0; rc == 0 && i < 16; i++) {
        int ih = i / 4, iw = i % 4;
        CHECK_NEAR(x->grad[i], ih % 2 == 0 && iw % 2 == 0 ? 1.0 : 0.0, 0);
    }
    ut_ctx_free(ctx);
}

/* Values from a small set with -inf and NaN (many ties) against a naive pool
 * applying the rule first max wins, NaN wins; the gradient of the sum marks
 * the chosen element of each window. k 2 s 2 takes the fast path (odd sizes,
 * a row longer than one vector), k 3 s 2 and k 2 s 1 the general one. */
static void check_pool_rule(int H, int W, int k, int s) {
    ut_ctx *ctx = new_ctx();
    ut_rng r;
    ut_rng_seed(&r, (uint64_t)(H * 100 + W + k));
    const float vals[6] = {-INFINITY, -1.0f, 0.0f, 1.0f, 2.0f, NAN};
    int64_t ne[4] = {2, 3, H, W}, n = 2 * 3 * H * W;
    ut_tensor *x = ut_tensor_new(ctx, UT_F32, 4, ne);
    for (int64_t i = 0; i < n; i++) ut_f32(x)[i] = vals[ut_rng_u64(&r) % 6];
    ut_tensor_set_requires_grad(x, true);
    ut_tensor *y = ut_max_pool2d(ctx, x, k, s);
    int rc = y ? ut_backward(ctx, ut_sum(ctx, y)) : -1;
    CHECK(rc == 0, "%s", ut_ctx_error(ctx));
    int OH = (H - k) / s + 1, OW = (W - k) / s + 1, bad = 0;
    float *cnt = calloc((size_t)n, sizeof(float));
    for (int p = 0; rc == 0 && p < 6; p++)
        for (int oh = 0; oh < OH; oh++)
            for (int ow = 0; ow < OW; ow++) {
                const float *xp = ut_f32(x) + p * H * W;
                float m = -INFINITY;
                int best = oh * s * W + ow * s;
                for (int kh = 0; kh < k; kh++)
                    for (int kw = 0; kw < k; kw++) {
                        int i = (oh * s + kh) * W + ow * s + kw;
                        if (xp[i] > m || isnan(xp[i])) {
                            m = xp[i];
                            best = i;
                        }
                    }
                float got = ut_f32(y)[(p * OH + oh) * OW + ow];
                if (!(got == m || (isnan(got) && isnan(m)))) bad++;
                cnt[p * H * W + best] += 1.0f;
            }
    CHECK(bad == 0, "%dx%d k%d s%d: %d outputs differ", H, W, k, s, bad);
    bad = 0;
    for (int64_t i = 0; rc == 0 && i < n; i++) bad += x->grad[i] != cnt[i];
    CHECK(bad == 0, "%dx%d k%d s%d: %d gradient elements differ", H, W, k, s, bad);
    free(cnt);
    ut_ctx_free(ctx);
}

static void test_max_pool2d_rule(void) {
    check_pool_rule(7, 9, 2, 2);
    check_pool_rule(5, 37, 2, 2);
    check_pool_rule(2, 2, 2, 2);
    check_pool_rule(7, 9, 3, 2);
    check_pool_rule(5, 6, 2, 1);
}

/* ---- attention ---- */
/* naive: per (b, h) scores with an explicit -inf mask, softmax, then P v */
static void naive_attention(double *out, const float *qkv, int B, int T, int C, int NH) {
    int hs = C / NH;
    double *sc = malloc(sizeof(double) * (size_t)(T * T));
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++) {
            for (int i = 0; i < T; i++)
                for (int j = 0; j < T; j++) {
                    double s = 0;
                    for (int d = 0; d < hs; d++)
                        s += (double)qkv[(b * T + i) * 3 * C + h * hs + d] *
                             qkv[(b * T + j) * 3 * C + C + h * hs + d];
                    sc[i * T + j] = j > i ? -INFINITY : s / sqrt((double)hs);
                }
            for (int i = 0; i < T; i++) {
                double m = -INFINITY, z = 0;
                for (int j = 0; j < T; j++) m = fmax(m, sc[i * T + j]);
                for (int j = 0; j < T; j++) z += exp(sc[i * T + j] - m);
                for (int d = 0; d < hs; d++) {
                    double o = 0;
                    for (int j = 0; j < T; j++)
                        o += exp(sc[i * T + j] - m) / z * qkv[(b * T + j) * 3 * C + 2 * C + h * hs + d];
                    out[(b * T + i) * C + h * hs + d] = o;
                }
            }
        }
    free(sc);
}

static void check_attention(int B, int T, int C, int NH) {
    ut_ctx *ctx = new_ctx();
    ut_rng r;
    ut_rng_seed(&r, (uint64_t)(B * 100 + T * 10 + NH));
    int64_t ne[3] = {B, T, 3 * C};
    ut_tensor *qkv = randn(ctx, &r, 3, ne);
    ut_tensor *y = ut_attention(ctx, qkv, NH);
    CHECK(y != NULL, "%s", ut_ctx_error(ctx));
    if (y) {
        CHECK(y->ndim == 3 && y->ne[0] == B && y->ne[1] == T && y->ne[2] == C, "shape");
        double *ref = malloc(sizeof(double) * (size_t)(B * T * C));
        naive_attention(ref, ut_f32(qkv), B, T, C, NH);
        double err = max_abs_diff(ut_f32(y), ref, (int64_t)B * T * C);
        CHECK(err < 1e-5, "B%d T%d C%d NH%d: max err %g", B, T, C, NH, err);
        free(ref);
    }
    ut_ctx_free(ctx);
}

static void test_attention_matches_naive(void) {
    check_attention(1, 1, 4, 1);
    check_attention(2, 5, 8, 2);
    check_attention(3, 7, 12, 3);
    check_attention(2, 16, 64, 4);
}

/* attention_masked with the causal flag and no padding is GPT-2's causal
 * attention (naive reference); with the last key of row 1 padded, row 1's
 * outputs before that key are unchanged (causal: they never saw it), while
 * the query at the padded key itself (which sees only earlier keys) differs */
static void test_attention_masked_causal(void) {
    int B = 2, T = 5, C = 8, NH = 2;
    ut_ctx *ctx = new_ctx();
    ut_rng r;
    ut_rng_seed(&r, 11);
    ut_tensor *qkv = randn(ctx, &r, 3, (int64_t[]){B, T, 3 * C});
    ut_tensor *q = ut_slice(ctx, qkv, 2, 0, C), *k = ut_slice(ctx, qkv, 2, C, 2 * C),
              *v = ut_slice(ctx, qkv, 2, 2 * C, 3 * C);
    float mk[10] = {0};
    mk[2 * T - 1] = -3.4028234663852886e38f;
    ut_tensor *mask = ut_tensor_from(ctx, UT_F32, 2, (int64_t[]){B, T}, mk);
    ut_tensor *y = ut_attention_qkv(ctx, q, k, v, NULL, NH, true, 0.0f);
    ut_tensor *ym = ut_attention_qkv(ctx, q, k, v, mask, NH, true, 0.0f);
    CHECK(y && ym, "%s", ut_ctx_error(ctx));
    if (y && ym) {
        double ref[80];
        naive_attention(ref, ut_f32(qkv), B, T, C, NH);
        double err = max_abs_diff(ut_f32(y), ref, (int64_t)B * T * C);
        CHECK(err < 1e-5, "causal: max err %g", err);
        CHECK(memcmp(ut_f32(y), ut_f32(ym), sizeof(float) * (size_t)((2 * T - 1) * C)) == 0,
              "rows before the padded key changed");
        CHECK(fabsf(ut_f32(y)[(2 * T - 1) * C] - ut_f32(ym)[(2 * T - 1) * C]) > 1e-4f,
              "the padded key was not masked for its own query");
    }
    /* example 0 all padding with the mask at -inf (autocast's rounding of
     * -FLT_MAX): it attends nowhere, zeros rather than NaN */
    for (int t = 0; t < T; t++) mk[t] = -INFINITY;
    ut_tensor *yz = ut_attention_qkv(ctx, q, k, v, ut_tensor_from(ctx, UT_F32, 2, (int64_t[]){B, T}, mk),
                                               NH, true, 0.0f);
    CHECK(yz, "%s", ut_ctx_error(ctx));
    for (int64_t i = 0; yz && i < (int64_t)T * C; i++) CHECK(ut_f32(yz)[i] == 0.0f, "[%lld] %g", (long long)i, ut_f32(yz)[i]);
    ut_ctx_free(ctx);
}

/* a strided qkv (a transposed view) gives the same result as its copy */
static void test_attention_strided_input(void) {
    ut_ctx *ctx = new_ctx();
    ut_rng r;
    ut_rng_seed(&r, 9);
    int64_t ne[3] = {2, 12, 6}; /* (B, 3C, T), transposed to (B, T, 3C) */
    ut_tensor *a = randn(ctx, &r, 3, ne);
    ut_tensor *v = ut_transpose(ctx, a, 1, 2);
    ut_tensor *y1 = ut_attention(ctx, v, 2), *y2 = ut_attention(ctx, ut_contiguous(ctx, v), 2);
    CHECK(y1 && y2, "%s", ut_ctx_error(ctx));
    if (y1 && y2)
        CHECK(memcmp(ut_f32(y1), ut_f32(y2), sizeof(float) * (size_t)ut_nelem(y1)) == 0,
              "strided and contiguous differ");
    ut_ctx_free(ctx);
}

/* attention_varlen on packed rows equals attention_masked's real rows of the
 * same batch padded (lengths 6, 2, 4 of T = 6, MiniLM's head size 32), with
 * and without the causal flag */
static void check_varlen_matches_masked(bool causal) {
    enum { B = 3, T = 6, C = 64, NH = 2 };
    const int len[B] = {6, 2, 4};
    ut_ctx *ctx = new_ctx();
    ut_rng r;
    ut_rng_seed(&r, 13);
    ut_tensor *x[3], *xp[3];
    float mk[B * T];
    int32_t off[B + 1] = {0};
    for (int b = 0; b < B; b++) {
        off[b + 1] = off[b] + len[b];
        for (int t = 0; t < T; t++) mk[b * T + t] = t < len[b] ? 0.0f : -3.4028234663852886e38f;
    }
    for (int i = 0; i < 3; i++) {
        x[i] = randn(ctx, &r, 3, (int64_t[]){B, T, C});
        xp[i] = ut_tensor_new(ctx, UT_F32, 2, (int64_t[]){off[B], C});
        for (int b = 0; b < B; b++)
            memcpy(ut_f32(xp[i]) + off[b] * C, ut_f32(x[i]) + b * T * C, sizeof(float) * (size_t)(len[b] * C));
    }
    ut_tensor *o = ut_tensor_from(ctx, UT_I32, 1, (int64_t[]){B + 1}, off);
    ut_tensor *ym = ut_attention_qkv(ctx, x[0], x[1], x[2], ut_tensor_from(ctx, UT_F32, 2, (int64_t[]){B, T}, mk),
                                     NH, causal, 0.0f);
    ut_tensor *yv = ut_attention_varlen(ctx, xp[0], xp[1], xp[2], o, NH, causal, 0.0f);
    ut_tensor *yv2 = ut_attention_varlen(ctx, xp[0], xp[1], xp[2], o, NH, causal, 0.0f);
    CHECK(ym && yv && yv2, "%s", ut_ctx_error(ctx));
    if (!ym || !yv || !yv2) {
        ut_ctx_free(ctx);
        return;
    }
    double err = 0;
    for (int b = 0; b < B; b++)
        for (int64_t i = 0; i < (int64_t)len[b] * C; i++)
            err = fmax(err, fabs(ut_f32(yv)[off[b] * C + i] - ut_f32(ym)[b * T * C + i]));
    CHECK(err < 1e-5, "packed vs padded (causal %d): max err %g", causal, err);
    CHECK(memcmp(ut_f32(yv), ut_f32(yv2), sizeof(float) * (size_t)ut_nelem(yv)) == 0, "not deterministic");
    ut_ctx_free(ctx);
}

static void test_attention_varlen_matches_masked(void) {
    check_varlen_matches_masked(false);
    check_varlen_matches_masked(true);
}

/* offsets that do not split the rows into sequences name the first bad entry */
static void test_attention_varlen_bad_offsets(void) {
    const int32_t bad[3][4] = {{0, 3, 2, 7}, {0, 3, 4, 6}, {1, 3, 4, 7}};
    const char *want[3] = {"offsets[2] = 2", "offsets[3] = 6", "offsets[0] = 1"};
    for (int i = 0; i < 3; i++) {
        ut_ctx *ctx = new_ctx();
        ut_tensor *q = ut_tensor_zeros(ctx, UT_F32, 2, (int64_t[]){7, 4});
        ut_tensor *o = ut_tensor_from(ctx, UT_I32, 1, (int64_t[]){4}, bad[i]);
        ut_tensor *y = ut_attention_varlen(ctx, q, q, q, o, 2, false, 0.0f);
        const char *e = ut_ctx_error(ctx);
        CHECK(y == NULL && e && strstr(e, "attention_varlen") && strstr(e, want[i]), "offsets %d: %s", i,
              e ? e : "(none)");
        ut_ctx_free(ctx);
    }
    ut_ctx *ctx = new_ctx();
    ut_tensor *q = ut_tensor_zeros(ctx, UT_F32, 2, (int64_t[]){7, 4});
    ut_tensor *y = ut_attention_varlen(ctx, q, q, q, ut_tensor_zeros(ctx, UT_F32, 1, (int64_t[]){2}), 2, false,
                                       0.0f);
    const char *e = ut_ctx_error(ctx);
    CHECK(y == NULL && e && strstr(e, "input 3 has dtype f32"), "f32 offsets: %s", e ? e : "(none)");
    ut_ctx_free(ctx);
}

static void test_attention_bad_heads(void) {
    ut_ctx *ctx = new_ctx();
    int64_t ne[3] = {1, 2, 3 * 6};
    ut_tensor *y = ut_attention(ctx, ut_tensor_zeros(ctx, UT_F32, 3, ne), 4);
    const char *e = ut_ctx_error(ctx);
    CHECK(y == NULL, "C %% NH != 0 accepted");
    CHECK(e && strstr(e, "attention") && strstr(e, "(1, 2, 18)"), "error: %s", e ? e : "(none)");
    ut_ctx_free(ctx);
}

/* ---- the tensor-parallel parts' ops: values and refusals ---- */
/* A vocabulary part (ids [2, 4) of 4): its own ids look up its rows, the
 * others give zero rows and no gradient; an id outside the vocabulary, a
 * part outside it, heads or columns outside the whole, a part that does not
 * fit and a bad target are refused with messages naming them. */
/* ut_concat_rows: a's rows then b's (a 16-bit one widened), and tensors
 * that differ after the first dimension refused; ut_collective_to refuses
 * a bad output shape and missing functions, naming the op */
static int copy_fn(void *user, ut_device dev, const float *in, int64_t in_n, float *out, int64_t out_n, char *err,
                   size_t errn) {
    (void)user, (void)dev, (void)err, (void)errn;
    for (int64_t i = 0; i < out_n; i++) out[i] = in[i % in_n];
    return 0;
}

static void test_concat_and_shaped_collective(void) {
    ut_ctx *ctx = new_ctx();
    float av[4] = {1, 2, 3, 4}, bv[2] = {5.5f, -6};
    ut_tensor *a = ut_tensor_from(ctx, UT_F32, 2, (int64_t[]){2, 2}, av);
    ut_tensor *b = ut_tensor_to(ctx, ut_tensor_from(ctx, UT_F32, 2, (int64_t[]){1, 2}, bv), UT_BF16);
    ut_tensor *y = ut_concat_rows(ctx, a, b);
    float got[8] = {0};
    CHECK(y && y->dtype == UT_F32 && y->ne[0] == 3 && y->ne[1] == 2 && !ut_tensor_get(y, got, 6 * sizeof(float)) &&
              got[0] == 1 && got[3] == 4 && got[4] == 5.5f && got[5] == -6,
          "concat_rows: %s", ut_ctx_error(ctx) ? ut_ctx_error(ctx) : "wrong values");
    ut_tensor *c = ut_tensor_from(ctx, UT_F32, 2, (int64_t[]){1, 4}, av);
    CHECK(!ut_concat_rows(ctx, a, c) && ut_ctx_error(ctx) && strstr(ut_ctx_error(ctx), "concat_rows") &&
              strstr(ut_ctx_error(ctx), "after the first"),
          "(2, 2) and (1, 4) concatenated: %s", ut_ctx_error(ctx) ? ut_ctx_error(ctx) : "no error");
    ut_ctx_free(ctx);
    ctx = new_ctx();
    a = ut_tensor_from(ctx, UT_F32, 2, (int64_t[]){2, 2}, av);
    y = ut_collective_to(ctx, a, 1, (int64_t[]){8}, copy_fn, copy_fn, NULL, "twice");
    CHECK(y && y->ne[0] == 8 && !ut_tensor_get(y, got, sizeof got) && got[4] == 1 && got[7] == 4,
          "collective_to: %s", ut_ctx_error(ctx) ? ut_ctx_error(ctx) : "wrong values");
    CHECK(!ut_collective_to(ctx, a, 1, (int64_t[]){8}, copy_fn, NULL, NULL, "half") && ut_ctx_error(ctx) &&
              strstr(ut_ctx_error(ctx), "half"),
          "a collective without a backward: %s", ut_ctx_error(ctx) ? ut_ctx_error(ctx) : "no error");
    ut_ctx_free(ctx);
}

/* A classifier's loss of scores (a regression head, num_labels 1): the mean
 * squared error of the (N, 1) logits against float targets, as transformers'
 * MSELoss(logits.squeeze(), labels); class ids still take the cross-entropy,
 * and other shapes are an error naming the model */
static void test_class_loss_of_scores(void) {
    ut_ctx *ctx = new_ctx();
    ut_model m = {.type = "bert"};
    const float logit[4] = {0.5f, -1.0f, 2.0f, 3.25f}, score[4] = {1.0f, 0.0f, 4.5f, 3.0f};
    ut_tensor *l = ut_tensor_from(ctx, UT_F32, 2, (int64_t[]){4, 1}, logit);
    ut_tensor *y = ut_tensor_from(ctx, UT_F32, 1, (int64_t[]){4}, score);
    ut_tensor *loss = ut_model_class_loss(&m, ctx, l, y);
    double want = 0;
    for (int i = 0; i < 4; i++) want += (double)(logit[i] - score[i]) * (logit[i] - score[i]) / 4;
    CHECK(loss && fabsf(ut_f32(loss)[0] - (float)want) < 1e-6f, "loss %g, want %g", loss ? ut_f32(loss)[0] : -1.0,
          want);
    /* two outputs an example with float targets */
    ut_tensor *l2 = ut_tensor_from(ctx, UT_F32, 2, (int64_t[]){2, 2}, logit);
    ut_tensor *y2 = ut_tensor_from(ctx, UT_F32, 1, (int64_t[]){2}, score);
    CHECK(!ut_model_class_loss(&m, ctx, l2, y2) && ut_ctx_error(ctx) &&
              strstr(ut_ctx_error(ctx), "bert regression loss") &&
              strstr(ut_ctx_error(ctx), "float targets (N) are scores: the logits must be (N, 1)"),
          "%s", ut_ctx_error(ctx) ? ut_ctx_error(ctx) : "(no error)");
    ut_ctx_free(ctx);
    /* class ids: cross-entropy, as before */
    ctx = new_ctx();
    const int32_t ids[2] = {1, 0};
    l2 = ut_tensor_from(ctx, UT_F32, 2, (int64_t[]){2, 2}, logit);
    ut_tensor *t = ut_tensor_from(ctx, UT_I32, 1, (int64_t[]){2}, ids);
    loss = ut_model_class_loss(&m, ctx, l2, t);
    double ce = (log(exp(0.5) + exp(-1.0)) + 1.0 + log(exp(2.0) + exp(3.25)) - 2.0) / 2;
    CHECK(loss && fabs(ut_f32(loss)[0] - ce) < 1e-5, "cross-entropy %g, want %g", loss ? ut_f32(loss)[0] : -1.0, ce);
    ut_ctx_free(ctx);
}

/* 0/1 targets (N, K): the mean binary cross-entropy with logits, as torch's
 * BCEWithLogitsLoss: mean of log(1 + e^x) - y x, and its gradient
 * (sigmoid(x) - y) / (N K); large logits stay finite */
static void test_class_loss_multi_label(void) {
    ut_ctx *ctx = new_ctx();
    ut_model m = {.type = "roberta"};
    const float logit[6] = {0.5f, -1.0f, 2.0f, 3.25f, -40.0f, 60.0f};
    const int32_t label[6] = {1, 0, 0, 1, 1, 0};
    ut_tensor *l = ut_tensor_from(ctx, UT_F32, 2, (int64_t[]){2, 3}, logit);
    ut_tensor_set_requires_grad(l, true);
    ut_tensor *y = ut_tensor_from(ctx, UT_I32, 2, (int64_t[]){2, 3}, label);
    ut_tensor *loss = ut_model_class_loss(&m, ctx, l, y);
    double want = 0;
    for (int i = 0; i < 6; i++) { /* log(1 + e^x) - y x, in the form that keeps e^60 out */
        double x = logit[i];
        want += (fmax(x, 0) + log1p(exp(-fabs(x))) - label[i] * x) / 6;
    }
    CHECK(loss && fabs(ut_f32(loss)[0] - want) < 1e-5 * want, "loss %.8g, want %.8g", loss ? ut_f32(loss)[0] : -1.0,
          want);
    CHECK(loss && ut_backward(ctx, loss) == 0 && l->grad, "backward: %s", ut_ctx_error(ctx) ? ut_ctx_error(ctx) : "");
    for (int i = 0; l->grad && i < 6; i++) {
        double g = (1 / (1 + exp(-(double)logit[i])) - label[i]) / 6;
        CHECK(fabs(l->grad[i] - g) < 1e-6, "gradient %d: %g, want %g", i, l->grad[i], g);
    }
    ut_ctx_free(ctx);
    /* targets of another shape */
    ctx = new_ctx();
    l = ut_tensor_from(ctx, UT_F32, 2, (int64_t[]){3, 2}, logit);
    y = ut_tensor_from(ctx, UT_I32, 2, (int64_t[]){2, 3}, label);
    CHECK(!ut_model_class_loss(&m, ctx, l, y) && ut_ctx_error(ctx) && strstr(ut_ctx_error(ctx), "roberta multi-label loss") &&
              strstr(ut_ctx_error(ctx), "the logits must be (N, K)"),
          "%s", ut_ctx_error(ctx) ? ut_ctx_error(ctx) : "(no error)");
    ut_ctx_free(ctx);
}

static void test_split_ops(void) {
    ut_ctx *ctx = new_ctx();
    int64_t tne[2] = {2, 2}, ine[1] = {3};
    float table[4] = {1, 2, 3, 4};
    int32_t ids[3] = {3, 0, 2};
    ut_tensor *w = ut_tensor_from(ctx, UT_F32, 2, tne, table);
    ut_tensor_set_requires_grad(w, true);
    ut_tensor *y = ut_embedding_part(ctx, ut_tensor_from(ctx, UT_I32, 1, ine, ids), w, 2, 4, -1);
    CHECK(y && ut_f32(y)[0] == 3 && ut_f32(y)[1] == 4 && ut_f32(y)[2] == 0 && ut_f32(y)[3] == 0 &&
              ut_f32(y)[4] == 1 && ut_f32(y)[5] == 2, "part lookup: %s", ut_ctx_error(ctx) ? ut_ctx_error(ctx) : "");
    CHECK(y && ut_backward(ctx, ut_sum(ctx, y)) == 0 && w->grad[0] == 1 && w->grad[2] == 1, "part gradient");
    ut_ctx_free(ctx);
    struct { const char *want; int what; } cases[] = {
        {"outside [0, 4)", 0}, {"must lie inside a vocabulary of 3", 1}, {"heads [2, 4) are not heads of 3", 2},
        {"columns [2, 2 + last dim) are not columns of 3", 3}, {"does not fit a vocabulary of 6", 4},
        {"target 9 at row 1 is outside [0, 8)", 5}};
    for (int c = 0; c < 6; c++) {
        ctx = new_ctx();
        ut_ctx_set_training(ctx, true);
        int32_t bad[3] = {3, 5, 0}, tg[2] = {1, 9};
        ut_tensor *x = ut_tensor_zeros(ctx, UT_F32, 3, (int64_t[]){1, 2, 4});
        ut_tensor *r = NULL;
        switch (cases[c].what) {
        case 0: r = ut_embedding_part(ctx, ut_tensor_from(ctx, UT_I32, 1, ine, bad), ut_tensor_zeros(ctx, UT_F32, 2, tne), 2, 4, -1); break;
        case 1: r = ut_embedding_part(ctx, ut_tensor_from(ctx, UT_I32, 1, ine, ids), ut_tensor_zeros(ctx, UT_F32, 2, tne), 2, 3, -1); break;
        case 2: r = ut_attention_qkv_heads(ctx, x, x, x, NULL, 2, false, 0.1f, 2, 3); break;
        case 3: r = ut_dropout_cols(ctx, x, 0.5f, 2, 3); break;
        case 4: r = ut_vocab_partials(ctx, ut_tensor_zeros(ctx, UT_F32, 2, (int64_t[]){2, 4}),
                                      ut_tensor_from(ctx, UT_I32, 1, (int64_t[]){2}, tg), 4, 6, 1, 2, -100); break;
        case 5: r = ut_vocab_ce(ctx, ut_tensor_zeros(ctx, UT_F32, 3, (int64_t[]){2, 2, 2}),
                                ut_tensor_from(ctx, UT_I32, 1, (int64_t[]){2}, tg), 8, -100); break;
        }
        const char *e = ut_ctx_error(ctx);
        CHECK(!r && e && strstr(e, cases[c].want), "case %d: %s", c, e ? e : "(accepted)");
        ut_ctx_free(ctx);
    }
}

int main(void) {
    RUN(test_layernorm_normalises_rows);
    RUN(test_rms_norm_values);
    RUN(test_rms_norm_bad_inputs);
    RUN(test_embedding_values);
    RUN(test_embedding_padding_idx);
    RUN(test_embedding_bad_index);
    RUN(test_conv2d_matches_naive);
    RUN(test_conv2d_backward_deterministic);
    RUN(test_conv2d_relu_fused);
    RUN(test_linear_gelu_fused);
    RUN(test_linear_ce_fused);
    RUN(test_conv2d_channel_mismatch);
    RUN(test_max_pool2d_known);
    RUN(test_max_pool2d_ties);
    RUN(test_max_pool2d_rule);
    RUN(test_attention_matches_naive);
    RUN(test_attention_strided_input);
    RUN(test_attention_masked_causal);
    RUN(test_attention_bad_heads);
    RUN(test_attention_varlen_matches_masked);
    RUN(test_attention_varlen_bad_offsets);
    RUN(test_split_ops);
    RUN(test_class_loss_of_scores);
    RUN(test_class_loss_multi_label);
    RUN(test_concat_and_shaped_collective);
    return TEST_SUMMARY();
}
