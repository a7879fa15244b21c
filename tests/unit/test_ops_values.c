/* Forward values of the unary, softmax and loss ops against references
 * computed here in double, plus their error paths (bad targets, bad shapes,
 * bad dropout p) and dropout's statistics. */
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <string.h>

#include "test.h"
#include "../../src/core/philox.h"
#include "utrain/base.h"
#include "utrain/ops.h"

static ut_ctx *ctx;

static ut_tensor *f32(int ndim, const int64_t *ne, const float *data) {
    return ut_tensor_from(ctx, UT_F32, ndim, ne, data);
}

static ut_tensor *i32(int ndim, const int64_t *ne, const int32_t *data) {
    return ut_tensor_from(ctx, UT_I32, ndim, ne, data);
}

static void fresh(void) {
    ut_ctx_reset(ctx);
    ut_ctx_clear_error(ctx);
    ut_ctx_set_training(ctx, true);
    ut_ctx_set_grad_enabled(ctx, true);
}

static double gelu_ref(double x) {
    return 0.5 * x * (1.0 + tanh(sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x)));
}

static const float xs[] = {-6.0f, -3.0f, -1.0f, -0.5f, 0.0f, 0.25f, 1.0f, 2.0f, 3.0f, 8.0f};
#define NX ((int64_t)(sizeof xs / sizeof xs[0]))

static void test_elementwise(void) {
    fresh();
    ut_tensor *x = f32(1, (int64_t[]){NX}, xs);
    const float *s = ut_f32(ut_scale(ctx, x, -1.5f)), *r = ut_f32(ut_relu(ctx, x)),
                *g = ut_f32(ut_gelu(ctx, x)), *th = ut_f32(ut_tanh(ctx, x)),
                *sg = ut_f32(ut_sigmoid(ctx, x));
    for (int64_t i = 0; i < NX; i++) {
        double v = xs[i];
        CHECK_NEAR(s[i], -1.5 * v, 1e-6);
        CHECK_NEAR(r[i], v > 0 ? v : 0.0, 0);
        CHECK_NEAR(g[i], gelu_ref(v), 2e-6);
        CHECK_NEAR(th[i], tanh(v), 1e-6);
        CHECK_NEAR(sg[i], 1.0 / (1.0 + exp(-v)), 1e-6);
    }
    CHECK_NEAR(g[6], 0.8411920071, 1e-6); /* gelu(1.0), PyTorch approximate='tanh' */
    CHECK_NEAR(g[1], -0.0036373920, 1e-6);
    CHECK(ut_ctx_error(ctx) == NULL, "%s", ut_ctx_error(ctx));
    /* extreme inputs stay finite */
    const float big[3] = {-1000.0f, 1000.0f, -88.0f};
    ut_tensor *b = f32(1, (int64_t[]){3}, big);
    const float *sb = ut_f32(ut_sigmoid(ctx, b)), *gb = ut_f32(ut_gelu(ctx, b));
    CHECK(sb[0] == 0.0f && sb[1] == 1.0f && sb[2] > 0.0f, "sigmoid %g %g %g", sb[0], sb[1], sb[2]);
    CHECK(gb[0] == 0.0f && gb[1] == 1000.0f, "gelu %g %g", gb[0], gb[1]);
}

/* exact GELU against erf in double, and PyTorch's gelu(1.0) */
static void test_gelu_erf_values(void) {
    ut_ctx *ctx = ut_ctx_new(NULL);
    const float xs[6] = {-6.0f, -1.5f, -0.1f, 0.0f, 1.0f, 3.0f};
    const float *g = ut_f32(ut_gelu_erf(ctx, ut_tensor_from(ctx, UT_F32, 1, (int64_t[]){6}, xs)));
    for (int i = 0; i < 6; i++)
        CHECK_NEAR(g[i], 0.5 * xs[i] * (1.0 + erf(xs[i] / sqrt(2.0))), 2e-6);
    CHECK_NEAR(g[4], 0.8413447460685429, 1e-6); /* torch.nn.functional.gelu(1.0) */
    ut_ctx_free(ctx);
}

/* d/dx of sum(gelu(x) * w) is w * gelu'(x): compare with central differences in double */
static void test_gelu_backward_values(void) {
    fresh();
    ut_tensor *x = f32(1, (int64_t[]){NX}, xs);
    ut_tensor_set_requires_grad(x, true);
    CHECK(ut_backward(ctx, ut_sum(ctx, ut_gelu(ctx, x))) == 0, "%s", ut_ctx_error(ctx));
    for (int64_t i = 0; i < NX; i++) {
        double h = 1e-5, v = xs[i];
        double d = (gelu_ref(v + h) - gelu_ref(v - h)) / (2 * h);
        CHECK_NEAR(x->grad[i], d, 2e-5);
    }
}

static void test_softmax_values(void) {
    fresh();
    /* 3 rows of 4; the last row has large logits that overflow a naive exp */
    const float v[12] = {1, 2, 3, 4, -1, 0, 0, 5, 1000, 1001, 999, 1000};
    ut_tensor *x = f32(2, (int64_t[]){3, 4}, v);
    const float *p = ut_f32(ut_softmax(ctx, x)), *lp = ut_f32(ut_log_softmax(ctx, x));
    for (int r = 0; r < 3; r++) {
        double m = -INFINITY, s = 0, rowsum = 0;
        for (int c = 0; c < 4; c++) m = fmax(m, v[r * 4 + c]);
        for (int c = 0; c < 4; c++) s += exp(v[r * 4 + c] - m);
        for (int c = 0; c < 4; c++) {
            double ref = exp(v[r * 4 + c] - m) / s;
            CHECK_NEAR(p[r * 4 + c], ref, 1e-6);
            CHECK_NEAR(lp[r * 4 + c], log(ref), 2e-6);
            rowsum += p[r * 4 + c];
        }
        CHECK_NEAR(rowsum, 1.0, 1e-6);
    }
    CHECK_NEAR(p[0], 0.0320586, 1e-6); /* softmax([1, 2, 3, 4])[0] */
}

/* softmax of a transposed view equals softmax of the transposed copy */
static void test_softmax_noncontiguous(void) {
    fresh();
    const float v[6] = {1, 2, 3, 4, 5, 7}; /* (2, 3) */
    ut_tensor *x = f32(2, (int64_t[]){2, 3}, v);
    const float *p = ut_f32(ut_softmax(ctx, ut_transpose(ctx, x, 0, 1))); /* (3, 2) rows */
    for (int r = 0; r < 3; r++) {
        double a = v[r], b = v[3 + r];
        CHECK_NEAR(p[2 * r], 1.0 / (1.0 + exp(b - a)), 1e-6);
        CHECK_NEAR(p[2 * r + 1], 1.0 / (1.0 + exp(a - b)), 1e-6);
    }
}

static const float ce_logits[6] = {1, 2, 3, 1, 1, 1}; /* (2, 3) */
/* -log softmax([1, 2, 3])[2] and -log softmax([1, 1, 1])[0] */
#define CE_ROW0 0.40760596444438
#define CE_ROW1 1.09861228866811

static void test_cross_entropy_values(void) {
    fresh();
    ut_tensor *x = f32(2, (int64_t[]){2, 3}, ce_logits);
    ut_tensor_set_requires_grad(x, true);
    ut_tensor *l = ut_cross_entropy(ctx, x, i32(1, (int64_t[]){2}, (int32_t[]){2, 0}), -100);
    CHECK(l && l->ndim == 1 && l->ne[0] == 1, "scalar loss");
    CHECK_NEAR(ut_f32(l)[0], (CE_ROW0 + CE_ROW1) / 2, 1e-6);
    /* dlogits = (softmax - onehot) / count */
    CHECK(ut_backward(ctx, l) == 0, "%s", ut_ctx_error(ctx));
    double s0 = exp(1) + exp(2) + exp(3);
    CHECK_NEAR(x->grad[0], exp(1) / s0 / 2, 1e-6);
    CHECK_NEAR(x->grad[2], (exp(3) / s0 - 1) / 2, 1e-6);
    CHECK_NEAR(x->grad[3], (1.0 / 3 - 1) / 2, 1e-6);
    CHECK_NEAR(x->grad[4], 1.0 / 3 / 2, 1e-6);

    /* the ignored row drops out of the mean and gets no gradient */
    fresh();
    x = f32(2, (int64_t[]){2, 3}, ce_logits);
    ut_tensor_set_requires_grad(x, true);
    l = ut_cross_entropy(ctx, x, i32(1, (int64_t[]){2}, (int32_t[]){2, -100}), -100);
    CHECK_NEAR(ut_f32(l)[0], CE_ROW0, 1e-6);
    CHECK(ut_backward(ctx, l) == 0, "%s", ut_ctx_error(ctx));
    CHECK(x->grad[3] == 0 && x->grad[4] == 0 && x->grad[5] == 0, "ignored row has gradient");

    /* every target ignored: loss 0 (PyTorch: nan), gradient 0 */
    fresh();
    x = f32(2, (int64_t[]){2, 3}, ce_logits);
    ut_tensor_set_requires_grad(x, true);
    l = ut_cross_entropy(ctx, x, i32(1, (int64_t[]){2}, (int32_t[]){1, 1}), 1);
    CHECK(l && ut_f32(l)[0] == 0.0f, "all ignored: %g", l ? ut_f32(l)[0] : -1.0);
    CHECK(ut_backward(ctx, l) == 0, "%s", ut_ctx_error(ctx));
    for (int i = 0; i < 6; i++) CHECK(x->grad[i] == 0.0f, "grad[%d] = %g", i, x->grad[i]);

    /* no-grad mode gives the same value */
    fresh();
    ut_ctx_set_grad_enabled(ctx, false);
    l = ut_cross_entropy(ctx, f32(2, (int64_t[]){2, 3}, ce_logits),
                         i32(1, (int64_t[]){2}, (int32_t[]){2, 0}), -100);
    CHECK_NEAR(ut_f32(l)[0], (CE_ROW0 + CE_ROW1) / 2, 1e-6);
}

/* Label smoothing eps 0.1 on the same logits: (1 - eps) -logp[target] + eps
 * mean(-logp); the references are torch's cross_entropy(label_smoothing=0.1)
 * in float64 (2.x). NLL on log-probabilities by the same formula; the
 * context's setting reaches ut_cross_entropy and ut_nll_loss; 16-bit logits
 * give the float32 path's bits for the same (rounded) values. */
static void test_label_smoothing_values(void) {
    const int32_t both[2] = {2, 0}, first[2] = {2, -100};
    fresh();
    ut_tensor *x = f32(2, (int64_t[]){2, 3}, ce_logits);
    ut_tensor_set_requires_grad(x, true);
    ut_tensor *l = ut_cross_entropy_smoothed(ctx, x, i32(1, (int64_t[]){2}, both), -100, 0.1f);
    CHECK_NEAR(ut_f32(l)[0], 0.8031091265562451, 1e-6);
    CHECK(ut_backward(ctx, l) == 0, "%s", ut_ctx_error(ctx));
    double s0 = exp(1) + exp(2) + exp(3);
    const double want[6] = {(exp(1) / s0 - 0.1 / 3) / 2, (exp(2) / s0 - 0.1 / 3) / 2, (exp(3) / s0 - 0.9 - 0.1 / 3) / 2,
                            (1.0 / 3 - 0.9 - 0.1 / 3) / 2, 0.0, 0.0}; /* row 1: uniform, 1/3 - 1/30 = 0.3 */
    for (int i = 0; i < 4; i++) CHECK_NEAR(x->grad[i], want[i], 1e-6);
    CHECK_NEAR(x->grad[4], 0.15, 1e-6);

    /* an ignored row is out of the mean and of the smoothing term */
    fresh();
    x = f32(2, (int64_t[]){2, 3}, ce_logits);
    ut_tensor_set_requires_grad(x, true);
    l = ut_cross_entropy_smoothed(ctx, x, i32(1, (int64_t[]){2}, first), -100, 0.1f);
    CHECK_NEAR(ut_f32(l)[0], 0.5076059644443804, 1e-6);
    CHECK(ut_backward(ctx, l) == 0, "%s", ut_ctx_error(ctx));
    CHECK(x->grad[3] == 0 && x->grad[4] == 0 && x->grad[5] == 0, "the ignored row has a gradient");

    /* the context's smoothing, and NLL of log_softmax equal to the fused loss */
    fresh();
    CHECK(ut_ctx_set_label_smoothing(ctx, 0.1f) == 0.0f, "the default is no smoothing");
    x = f32(2, (int64_t[]){2, 3}, ce_logits);
    ut_tensor_set_requires_grad(x, true);
    ut_tensor *lp = ut_log_softmax(ctx, x);
    ut_tensor_set_requires_grad(lp, true);
    ut_tensor *nll = ut_nll_loss(ctx, lp, i32(1, (int64_t[]){2}, both), -100);
    float fused = ut_f32(ut_cross_entropy(ctx, x, i32(1, (int64_t[]){2}, both), -100))[0];
    CHECK_NEAR(ut_f32(nll)[0], 0.8031091265562451, 1e-6);
    CHECK_NEAR(fused, 0.8031091265562451, 1e-6);
    CHECK(ut_backward(ctx, nll) == 0, "%s", ut_ctx_error(ctx));
    for (int i = 0; i < 4; i++) CHECK_NEAR(x->grad[i], want[i], 1e-6);
    ut_ctx_set_label_smoothing(ctx, 0.0f);

    /* 16-bit logits: the float32 path's loss and gradient for the same values */
    for (int d = 0; d < 2; d++) {
        ut_dtype dt = d ? UT_F16 : UT_BF16;
        float lg[12] = {1.5f, -2.25f, 0.5f, 3.0f, 0.0f, 1.0f, -1.0f, 2.0f, 0.25f, 0.75f, -0.5f, 1.25f};
        int32_t tg[3] = {1, 3, -100};
        fresh();
        ut_tensor *a = f32(2, (int64_t[]){3, 4}, lg), *b = ut_tensor_to(ctx, a, dt);
        ut_tensor_set_requires_grad(a, true);
        ut_tensor_set_requires_grad(b, true);
        ut_tensor *la = ut_cross_entropy_smoothed(ctx, a, i32(1, (int64_t[]){3}, tg), -100, 0.2f);
        ut_tensor *lb = ut_cross_entropy_smoothed(ctx, b, i32(1, (int64_t[]){3}, tg), -100, 0.2f);
        CHECK(la && lb && ut_f32(la)[0] == ut_f32(lb)[0], "%s logits: %g, float32 %g", ut_dtype_name(dt),
              lb ? ut_f32(lb)[0] : 0.0, la ? ut_f32(la)[0] : 0.0);
        CHECK(ut_backward(ctx, ut_add(ctx, la, lb)) == 0, "%s", ut_ctx_error(ctx));
        float g16[12];
        ut_tensor *gb = ut_tensor_to(ctx, ut_tensor_from(ctx, dt, 2, (int64_t[]){3, 4}, b->grad), UT_F32);
        memcpy(g16, ut_f32(gb), sizeof g16);
        for (int i = 0; i < 12; i++) {
            float r = ut_f32(ut_tensor_to(ctx, ut_tensor_to(ctx, ut_tensor_from(ctx, UT_F32, 1, (int64_t[]){1},
                                                                                  &a->grad[i]),
                                                            dt),
                                          UT_F32))[0];
            CHECK(g16[i] == r, "%s gradient %d: %g, float32's rounded %g", ut_dtype_name(dt), i, g16[i], r);
        }
    }

    /* eps outside [0, 1] is refused naming the op */
    fresh();
    CHECK(!ut_cross_entropy_smoothed(ctx, f32(2, (int64_t[]){2, 3}, ce_logits), i32(1, (int64_t[]){2}, both), -100,
                                     1.5f) &&
              strstr(ut_ctx_error(ctx), "label smoothing 1.5 is not in [0, 1]"),
          "%s", ut_ctx_error(ctx));
}

/* a GPT-2 sized vocabulary over a few rows, against a double reference */
static void test_cross_entropy_large_vocab(void) {
    fresh();
    int64_t N = test_quick() ? 3 : 8, V = 50257;
    float *v = ut_malloc_check(sizeof(float) * (size_t)(N * V));
    int32_t tg[8];
    ut_rng r;
    ut_rng_seed(&r, 7);
    for (int64_t i = 0; i < N * V; i++) v[i] = 4.0f * ut_rng_normal(&r);
    for (int64_t n = 0; n < N; n++) tg[n] = (int32_t)(ut_rng_u64(&r) % (uint64_t)V);
    ut_tensor *l = ut_cross_entropy(ctx, f32(2, (int64_t[]){N, V}, v), i32(1, &N, tg), -100);
    double ref = 0;
    for (int64_t n = 0; n < N; n++) {
        double m = -INFINITY, s = 0;
        for (int64_t c = 0; c < V; c++) m = fmax(m, v[n * V + c]);
        for (int64_t c = 0; c < V; c++) s += exp(v[n * V + c] - m);
        ref += m + log(s) - v[n * V + tg[n]];
    }
    CHECK(l != NULL, "%s", ut_ctx_error(ctx));
    if (l) CHECK_NEAR(ut_f32(l)[0], ref / N, 1e-5 * fabs(ref / N));
    ut_free(v);
}

static void test_nll_loss_values(void) {
    fresh();
    const float lp[6] = {-0.5f, -1.0f, -2.0f, -3.0f, -0.25f, -4.0f};
    ut_tensor *x = f32(2, (int64_t[]){2, 3}, lp);
    ut_tensor_set_requires_grad(x, true);
    ut_tensor *l = ut_nll_loss(ctx, x, i32(1, (int64_t[]){2}, (int32_t[]){1, 2}), -100);
    CHECK_NEAR(ut_f32(l)[0], (1.0 + 4.0) / 2, 1e-6);
    CHECK(ut_backward(ctx, l) == 0, "%s", ut_ctx_error(ctx));
    const float want[6] = {0, -0.5f, 0, 0, 0, -0.5f};
    for (int i = 0; i < 6; i++) CHECK_NEAR(x->grad[i], want[i], 0);

    /* nll_loss(log_softmax(x)) == cross_entropy(x), 3-D, with an ignored target */
    fresh();
    ut_tensor *lg = f32(3, (int64_t[]){1, 2, 3}, ce_logits);
    ut_tensor *tg = i32(2, (int64_t[]){1, 2}, (int32_t[]){2, 0});
    float a = ut_f32(ut_nll_loss(ctx, ut_log_softmax(ctx, lg), tg, 0))[0];
    float b = ut_f32(ut_cross_entropy(ctx, lg, tg, 0))[0];
    CHECK_NEAR(a, CE_ROW0, 1e-6);
    CHECK_NEAR(b, CE_ROW0, 1e-6);
}

static void test_mse_values(void) {
    fresh();
    ut_tensor *a = f32(2, (int64_t[]){1, 3}, (float[]){1, 2, 3});
    ut_tensor *b = f32(2, (int64_t[]){1, 3}, (float[]){1, 0, 0});
    ut_tensor_set_requires_grad(a, true);
    ut_tensor_set_requires_grad(b, true);
    ut_tensor *l = ut_mse(ctx, a, b);
    CHECK_NEAR(ut_f32(l)[0], 13.0 / 3.0, 1e-6);
    CHECK(ut_backward(ctx, l) == 0, "%s", ut_ctx_error(ctx));
    CHECK_NEAR(a->grad[1], 4.0 / 3.0, 1e-6);
    CHECK_NEAR(b->grad[2], -2.0, 1e-6);
    CHECK_NEAR(a->grad[0], 0.0, 0);

    /* larger than one block: the blocked double sum is exact enough */
    fresh();
    int64_t n = 100003;
    ut_tensor *x = ut_tensor_zeros(ctx, UT_F32, 1, &n), *y = ut_tensor_zeros(ctx, UT_F32, 1, &n);
    for (int64_t i = 0; i < n; i++) ut_f32(x)[i] = (float)(i % 7) * 0.5f;
    double ref = 0;
    for (int64_t i = 0; i < n; i++) ref += (double)ut_f32(x)[i] * ut_f32(x)[i];
    CHECK_NEAR(ut_f32(ut_mse(ctx, x, y))[0], ref / n, 1e-6 * ref / n);
}

/* Philox4x32-10 against the known-answer vectors of its authors' Random123
 * library (counter words, key words -> output words); keep masks are the
 * stream's uniforms in order, from the offset on, whatever the thread
 * count; the offset moves past them in blocks of 4. */
static void test_philox(void) {
    static const struct { uint32_t ctr[4], key[2], out[4]; } kat[] = {
        {{0, 0, 0, 0}, {0, 0}, {0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}},
        {{0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff}, {0xffffffff, 0xffffffff},
         {0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}},
        {{0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344}, {0xa4093822, 0x299f31d0},
         {0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}},
    };
    for (size_t k = 0; k < sizeof kat / sizeof kat[0]; k++) {
        uint32_t o[4];
        uint64_t block = kat[k].ctr[0] | (uint64_t)kat[k].ctr[1] << 32;
        uint64_t stream = kat[k].ctr[2] | (uint64_t)kat[k].ctr[3] << 32;
        ut_philox_block(kat[k].key[0] | (uint64_t)kat[k].key[1] << 32, stream, block, o);
        CHECK(!memcmp(o, kat[k].out, sizeof o), "vector %zu: %08x %08x %08x %08x", k, o[0], o[1], o[2], o[3]);
    }
    enum { N = 100003 };
    static uint8_t m[N], m1[N];
    ut_philox g;
    ut_philox_seed(&g, 7);
    g.stream = 12345;
    g.offset = 8;
    ut_philox h = g;
    const ut_philox g0 = g;
    ut_philox_keep_mask(&g, m, 0.1f, N);
    int64_t differ = 0, kept = 0;
    for (int64_t i = 0; i < N; i++) {
        differ += m[i] != (ut_philox_uniform(g.key, g.stream, 8 + (uint64_t)i) >= 0.1f);
        kept += m[i];
    }
    CHECK(differ == 0, "%lld masks differ from the stream's draws", (long long)differ);
    CHECK(g.offset == 8 + (N + 3) / 4 * 4, "offset %llu", (unsigned long long)g.offset);
    CHECK_NEAR((double)kept / N, 0.9, 0.01);
    int threads = omp_get_max_threads();
    omp_set_num_threads(1);
    ut_philox_keep_mask(&h, m1, 0.1f, N);
    omp_set_num_threads(threads);
    CHECK(!memcmp(m, m1, N), "one thread draws other masks");
    /* slices at any element (not only multiples of 4) are the whole mask's */
    const int64_t at[][2] = {{0, 5}, {1, 3}, {3, 9}, {7, 1}, {4093, 20000}, {N - 6, 6}};
    bool slices = true;
    for (size_t k = 0; k < sizeof at / sizeof at[0]; k++) {
        memset(m1, 2, (size_t)at[k][1] + 1);
        ut_philox_keep_mask_at(&g0, m1, 0.1f, (uint64_t)at[k][0], at[k][1]);
        slices &= !memcmp(m1, m + at[k][0], (size_t)at[k][1]) && m1[at[k][1]] == 2;
    }
    CHECK(slices, "ut_philox_keep_mask_at's slices differ from the mask");
    CHECK(ut_philox_stream(1, 2, 0) != ut_philox_stream(1, 2, 1) &&
              ut_philox_stream(1, 2, 0) != ut_philox_stream(2, 1, 0),
          "streams of different coordinates coincide");
}

/* What the CUDA backend's mask kernel computes for each element on its own
 * (src/core/philox.h: ut_dropout_draw, ut_philox_keep) against the masks
 * the CPU draws in blocks: a whole tensor's at a window's offset, a
 * tensor-parallel part's columns of every row, and attention's
 * probabilities for a part of the heads. */
static void test_dropout_mask_per_element(void) {
    enum { R = 37, COLS = 29, ALL = 96, C0 = 35, N = R * COLS };
    static uint8_t cpu[R * ALL], dev[R * ALL];
    ut_philox g;
    ut_philox_seed(&g, 11);
    g.stream = ut_philox_stream(3, 4, 5);
    const uint64_t offsets[] = {0, 8, (uint64_t)5 << 40, ((uint64_t)7 << 40) + 12};
    int64_t bad = 0;
    for (size_t k = 0; k < sizeof offsets / sizeof offsets[0]; k++) {
        g.offset = offsets[k];
        ut_philox g2 = g;
        ut_philox_keep_mask(&g2, cpu, 0.25f, R * ALL);
        for (int64_t e = 0; e < R * ALL; e++)
            dev[e] = ut_philox_keep(g.key, g.stream, ut_dropout_draw(g.offset, e, 0, 0, 0), 0.25f);
        bad += memcmp(cpu, dev, R * ALL) != 0;
        for (int64_t r = 0; r < R; r++) ut_philox_keep_mask_at(&g, cpu + r * COLS, 0.25f, (uint64_t)(r * ALL + C0), COLS);
        for (int64_t e = 0; e < N; e++) dev[e] = ut_philox_keep(g.key, g.stream, ut_dropout_draw(g.offset, e, ALL, COLS, C0), 0.25f);
        bad += memcmp(cpu, dev, N) != 0;
    }
    /* attention's probabilities, a part of the heads: batch row b's NH x BLK
     * of the whole row's NHALL x BLK, from head H0 on */
    enum { B = 3, NH = 2, NHALL = 5, H0 = 1, BLK = 7 * 9 };
    static uint8_t acpu[B * NH * BLK], adev[B * NH * BLK];
    for (size_t k = 0; k < sizeof offsets / sizeof offsets[0]; k++) {
        g.offset = offsets[k];
        for (int64_t b = 0; b < B; b++)
            for (int64_t h = 0; h < NH; h++)
                ut_philox_keep_mask_at(&g, acpu + (b * NH + h) * BLK, 0.25f, (uint64_t)(b * NHALL * BLK + (H0 + h) * BLK),
                                       BLK);
        for (int64_t e = 0; e < B * NH * BLK; e++)
            adev[e] = ut_philox_keep(g.key, g.stream, ut_dropout_draw(g.offset, e, NHALL * BLK, NH * BLK, H0 * BLK), 0.25f);
        bad += memcmp(acpu, adev, sizeof acpu) != 0;
    }
    /* packed attention, a part of the heads: sequences of 3, 1 and 5 rows */
    const int64_t Ls[3] = {3, 1, 5};
    int64_t poff[4] = {0};
    for (int s = 0; s < 3; s++) poff[s + 1] = poff[s] + NH * Ls[s] * Ls[s];
    for (size_t k = 0; k < sizeof offsets / sizeof offsets[0]; k++) {
        g.offset = offsets[k];
        for (int s = 0; s < 3; s++)
            for (int64_t h = 0; h < NH; h++) {
                int64_t blk = Ls[s] * Ls[s];
                ut_philox_keep_mask_at(&g, acpu + poff[s] + h * blk, 0.25f, (uint64_t)(poff[s] / NH * NHALL + (H0 + h) * blk),
                                       blk);
            }
        for (int64_t e = 0; e < poff[3]; e++) {
            int s = e < poff[1] ? 0 : e < poff[2] ? 1 : 2;
            adev[e] = ut_philox_keep(g.key, g.stream,
                                     ut_varlen_draw(g.offset, e, poff[s], Ls[s] * Ls[s], NH, NHALL, H0), 0.25f);
        }
        bad += memcmp(acpu, adev, (size_t)poff[3]) != 0;
    }
    CHECK(bad == 0, "%lld of 16 masks computed per element differ from the blocked draws", (long long)bad);
}

static void test_dropout(void) {
    fresh();
    int64_t n = test_quick() ? 20000 : 200000;
    float p = 0.3f;
    ut_tensor *x = ut_tensor_new(ctx, UT_F32, 1, &n);
    for (int64_t i = 0; i < n; i++) ut_f32(x)[i] = 1.0f + (float)(i % 5);
    ut_tensor_set_requires_grad(x, true);
    ut_tensor *y = ut_dropout(ctx, x, p);
    CHECK(y && y != x, "training dropout makes a new tensor");
    int64_t kept = 0, wrong = 0;
    for (int64_t i = 0; i < n; i++) {
        float o = ut_f32(y)[i];
        if (o != 0.0f) {
            kept++;
            if (fabsf(o - ut_f32(x)[i] / (1.0f - p)) > 1e-5f * o) wrong++;
        }
    }
    CHECK(wrong == 0, "%lld survivors not scaled by 1/(1-p)", (long long)wrong);
    CHECK_NEAR((double)kept / n, 1.0 - p, 0.01);
    /* backward: the same mask and scale */
    CHECK(ut_backward(ctx, ut_sum(ctx, y)) == 0, "%s", ut_ctx_error(ctx));
    for (int64_t i = 0; i < n; i++)
        if ((ut_f32(y)[i] != 0.0f) != (x->grad[i] != 0.0f) ||
            (x->grad[i] != 0.0f && fabsf(x->grad[i] - 1.0f / (1.0f - p)) > 1e-6f)) {
            CHECK(0, "gradient at %lld: %g for output %g", (long long)i, x->grad[i], ut_f32(y)[i]);
            break;
        }

    /* same seed, same mask */
    fresh();
    ut_ctx_seed(ctx, 99);
    float a = ut_f32(ut_dropout(ctx, f32(1, (int64_t[]){NX}, xs), 0.5f))[7];
    ut_ctx_seed(ctx, 99);
    float b = ut_f32(ut_dropout(ctx, f32(1, (int64_t[]){NX}, xs), 0.5f))[7];
    CHECK(a == b, "same seed, different masks");

    /* eval mode and p = 0: identity, nothing on the tape */
    fresh();
    x = f32(1, (int64_t[]){NX}, xs);
    ut_tensor_set_requires_grad(x, true);
    ut_ctx_set_training(ctx, false);
    CHECK(ut_dropout(ctx, x, 0.5f) == x, "eval mode is the identity");
    ut_ctx_set_training(ctx, true);
    CHECK(ut_dropout(ctx, x, 0.0f) == x, "p = 0 is the identity");
    CHECK(ut_ctx_tape_len(ctx) == 0, "tape has %d entries", ut_ctx_tape_len(ctx));
}

/* NEFTune's noise: x + mag (2u - 1), u the launch's draws as uniforms (the
 * draws a whole-tensor dropout mask takes), exactly; within [-mag, mag),
 * mean 0; the gradient passes through; the next launch draws anew; eval
 * mode and mag 0 are the identity; a bad mag is refused. */
static void test_uniform_noise(void) {
    fresh();
    int64_t n = test_quick() ? 20000 : 200000;
    const float mag = 0.25f;
    ut_tensor *x = ut_tensor_new(ctx, UT_F32, 1, &n);
    for (int64_t i = 0; i < n; i++) ut_f32(x)[i] = 1.0f + (float)(i % 5);
    ut_tensor_set_requires_grad(x, true);
    uint64_t st[4];
    ut_ctx_rng_get(ctx, st);
    ut_tensor *y = ut_uniform_noise(ctx, x, mag);
    CHECK(y && y != x, "training noise makes a new tensor");
    int64_t wrong = 0, out = 0;
    double sum = 0;
    for (int64_t i = 0; i < n; i++) {
        float u = ut_philox_uniform(st[0], st[1], st[2] + (uint64_t)i), noise = mag * (2.0f * u - 1.0f);
        wrong += ut_f32(y)[i] != ut_f32(x)[i] + noise;
        out += !(noise >= -mag && noise < mag);
        sum += noise;
    }
    CHECK(wrong == 0, "%lld values are not x + mag (2u - 1) of their draw", (long long)wrong);
    CHECK(out == 0, "%lld draws outside [-mag, mag)", (long long)out);
    CHECK_NEAR(sum / (double)n, 0.0, 0.005);
    CHECK(ut_backward(ctx, ut_sum(ctx, y)) == 0, "%s", ut_ctx_error(ctx));
    int64_t bad = 0;
    for (int64_t i = 0; i < n; i++) bad += x->grad[i] != 1.0f;
    CHECK(bad == 0, "%lld gradients are not 1", (long long)bad);
    ut_tensor *y2 = ut_uniform_noise(ctx, x, mag);
    CHECK(y2 && memcmp(ut_f32(y), ut_f32(y2), (size_t)n * sizeof(float)), "a second launch draws anew");

    fresh();
    x = f32(1, (int64_t[]){NX}, xs);
    ut_tensor_set_requires_grad(x, true);
    ut_ctx_set_training(ctx, false);
    CHECK(ut_uniform_noise(ctx, x, mag) == x, "eval mode is the identity");
    ut_ctx_set_training(ctx, true);
    CHECK(ut_uniform_noise(ctx, x, 0.0f) == x, "mag 0 is the identity");
    CHECK(ut_ctx_tape_len(ctx) == 0, "tape has %d entries", ut_ctx_tape_len(ctx));
    const float badm[] = {-1.0f, NAN, INFINITY};
    for (int i = 0; i < 3; i++) {
        fresh();
        x = f32(1, (int64_t[]){NX}, xs);
        CHECK(ut_uniform_noise(ctx, x, badm[i]) == NULL, "accepted mag %g", (double)badm[i]);
        const char *e = ut_ctx_error(ctx);
        CHECK(e && strstr(e, "uniform_noise") && strstr(e, "mag"), "error: %s", e ? e : "(none)");
    }
}

static void test_errors(void) {
    fresh();
    ut_tensor *x = f32(2, (int64_t[]){2, 3}, ce_logits);
    /* out-of-range target: NULL, error naming the op, the value and position */
    ut_tensor *l = ut_cross_entropy(ctx, x, i32(1, (int64_t[]){2}, (int32_t[]){0, 3}), -100);
    const char *e = ut_ctx_error(ctx);
    CHECK(l == NULL, "bad target accepted");
    CHECK(e && strstr(e, "cross_entropy") && strstr(e, "target 3") && strstr(e, "position 1"),
          "error: %s", e ? e : "(none)");
    fresh();
    x = f32(2, (int64_t[]){2, 3}, ce_logits);
    l = ut_cross_entropy(ctx, x, i32(1, (int64_t[]){2}, (int32_t[]){-1, 0}), -100);
    CHECK(l == NULL && ut_ctx_error(ctx) && strstr(ut_ctx_error(ctx), "target -1"), "negative target");
    fresh();
    x = f32(2, (int64_t[]){2, 3}, ce_logits);
    l = ut_nll_loss(ctx, x, i32(1, (int64_t[]){2}, (int32_t[]){5, 0}), -100);
    e = ut_ctx_error(ctx);
    CHECK(l == NULL && e && strstr(e, "nll_loss") && strstr(e, "target 5"), "error: %s",
          e ? e : "(none)");

    /* targets of the wrong shape or dtype */
    fresh();
    x = f32(2, (int64_t[]){2, 3}, ce_logits);
    l = ut_cross_entropy(ctx, x, i32(1, (int64_t[]){3}, (int32_t[]){0, 0, 0}), -100);
    e = ut_ctx_error(ctx);
    CHECK(l == NULL && e && strstr(e, "cross_entropy") && strstr(e, "(2, 3)") && strstr(e, "(3,)"),
          "error: %s", e ? e : "(none)");
    fresh();
    x = f32(2, (int64_t[]){2, 3}, ce_logits);
    l = ut_cross_entropy(ctx, x, f32(1, (int64_t[]){2}, (float[]){0, 0}), -100);
    CHECK(l == NULL && ut_ctx_error(ctx) && strstr(ut_ctx_error(ctx), "i32"), "f32 targets");

    /* mse shape mismatch names the op and both shapes */
    fresh();
    ut_tensor *a = ut_tensor_zeros(ctx, UT_F32, 2, (int64_t[]){2, 3});
    ut_tensor *b = ut_tensor_zeros(ctx, UT_F32, 2, (int64_t[]){3, 2});
    CHECK(ut_mse(ctx, a, b) == NULL, "mse accepted different shapes");
    e = ut_ctx_error(ctx);
    CHECK(e && strstr(e, "mse") && strstr(e, "(2, 3)") && strstr(e, "(3, 2)"), "error: %s",
          e ? e : "(none)");

    /* dropout p outside [0, 1) */
    float bad[3] = {1.0f, -0.1f, NAN};
    for (int i = 0; i < 3; i++) {
        fresh();
        a = ut_tensor_zeros(ctx, UT_F32, 2, (int64_t[]){2, 3});
        CHECK(ut_dropout(ctx, a, bad[i]) == NULL, "dropout accepted p = %g", bad[i]);
        e = ut_ctx_error(ctx);
        CHECK(e && strstr(e, "dropout"), "error: %s", e ? e : "(none)");
    }

    /* a NULL input propagates */
    fresh();
    CHECK(ut_gelu(ctx, NULL) == NULL && ut_softmax(ctx, NULL) == NULL, "NULL input");
}

int main(void) {
    ctx = ut_ctx_new(&(ut_ctx_opts){.seed = 1});
    RUN(test_elementwise);
    RUN(test_gelu_backward_values);
    RUN(test_gelu_erf_values);
    RUN(test_philox);
    RUN(test_softmax_values);
    RUN(test_softmax_noncontiguous);
    RUN(test_cross_entropy_values);
    RUN(test_label_smoothing_values);
    RUN(test_cross_entropy_large_vocab);
    RUN(test_nll_loss_values);
    RUN(test_mse_values);
    RUN(test_dropout_mask_per_element);
    RUN(test_dropout);
    RUN(test_uniform_noise);
    RUN(test_errors);
    ut_ctx_free(ctx);
    return TEST_SUMMARY();
}
