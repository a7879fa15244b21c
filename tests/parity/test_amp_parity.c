/* Mixed-precision parity with PyTorch's CPU autocast: utrain's bf16 and fp16
 * runs of the tiny GPT-2 and the CNN (train.precision's autocast on a
 * context) against tests/parity/fixtures/amp.safetensors, written by
 * tests/parity/make_amp_fixtures.py from the same weights and batches as the
 * float32 fixtures: the logits, the loss and the losses of 10 AdamW steps
 * (float32 master weights). The tolerances and why they are what they are:
 * docs/testing.md. Run from the repository root. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fixture_init.h"
#include "test.h"
#include "parity.h"
#include "utrain/base.h"
#include "utrain/io.h"
#include "utrain/nn.h"
#include "utrain/ops.h"
#include "utrain/optim.h"


typedef struct {
    const char *name;
    const char *opts[12]; /* key, value, ..., NULL */
    /* bf16 also checked nearer PyTorch's bf16 than its float32: not for the
     * CNN, whose logits bf16 moves by only 3.3e-4 (PyTorch's two results),
     * the size of the summation-order differences between oneDNN's direct
     * convolution and PyTorch's, so nearness cannot tell the formats apart */
    bool vs_fp32;
} model_case;

static const model_case gpt2_case = {
    "gpt2", {"n_layer", "2", "n_head", "4", "n_embd", "64", "vocab_size", "97", "block_size", "16", NULL}, true};
static const model_case cnn_case = {"cnn", {NULL}, false};

/* Per dtype: logits (max-abs error over max-abs value), loss (relative) and
 * AdamW losses (over the largest loss of the run). docs/testing.md derives
 * them from each format's unit roundoff u (bf16 2^-8, fp16 2^-11). */
typedef struct {
    const char *name;
    ut_dtype dt;
    const char *other;          /* the other 16-bit format: a wrong rounding */
    double unit;                /* unit roundoff u: 2^-8, 2^-11 */
    double logits, loss, adamw; /* 4 u, u, u */
    double same;                /* computed the same way: u (bf16), 2 u (fp16) */
    bool vs_fp32;               /* also 4 times nearer than PyTorch's float32 */
} dtype_case;

static const dtype_case dtypes[] = {
    {"bf16", UT_BF16, "fp16", 1.0 / 256, 4.0 / 256, 1.0 / 256, 1.0 / 256, 1.0 / 256, true},
    {"fp16", UT_F16, "bf16", 1.0 / 2048, 4.0 / 2048, 1.0 / 2048, 1.0 / 2048, 2.0 / 2048, false},
};

/* The stored float32 tensor "<model>.<dtype>.<what>" (NULL, with a failed
 * check, if absent or not of n elements). */
static const float *amp_ref(const ut_st_file *f, const char *model, const char *dt, const char *what,
                            int64_t n) {
    char name[128];
    snprintf(name, sizeof name, "%s.%s.%s", model, dt, what);
    const ut_st_tensor *t = ut_st_get(f, name);
    CHECK(t && t->dtype == UT_ST_F32 && ut_st_numel(t) == n, "amp fixture: %s missing or not %lld floats",
          name, (long long)n);
    return t && t->dtype == UT_ST_F32 && ut_st_numel(t) == n ? t->data : NULL;
}

/* The model with the fixture's initial parameters, or NULL. */
static ut_model *build(const model_case *c, const ut_st_file *f) {
    ut_model *m = pt_model(c->name, c->opts, 1);
    char err[512];
    const char *seed = ut_st_meta(f, "seed");
    CHECK(seed, "%s fixture: no seed", c->name);
    if (m && seed && fx_fill_model(m, strtoull(seed, NULL, 10), err, sizeof err)) {
        CHECK(0, "%s: %s", c->name, err);
        ut_model_free(m), m = NULL;
    }
    return m;
}

/* Forward (output as float32 into logits, if given), loss and, with
 * backward, its gradients; the loss, or NAN. */
static double step(ut_model *m, ut_ctx *ctx, const ut_st_file *f, float *logits, bool backward) {
    ut_tensor *x = pt_stored(ctx, ut_st_get(f, "input")), *y = pt_stored(ctx, ut_st_get(f, "targets"));
    ut_tensor *out = ut_model_forward(m, ctx, x);
    ut_tensor *loss = out ? ut_model_loss(m, ctx, out, y) : NULL;
    CHECK(loss, "%s: %s", m->type, ut_ctx_error(ctx));
    if (!loss) return NAN;
    if (logits) {
        ut_tensor *o32 = ut_tensor_to(ctx, out, UT_F32);
        ut_tensor_get(o32, logits, (size_t)ut_nelem(o32) * sizeof(float));
    }
    if (backward && ut_backward(ctx, loss)) {
        CHECK(0, "%s: backward: %s", m->type, ut_ctx_error(ctx));
        return NAN;
    }
    float l;
    ut_tensor_get(loss, &l, sizeof l);
    return l;
}

/* Logits and loss of one forward under autocast: within the dtype's
 * tolerance of PyTorch's autocast result. Against PyTorch computed the same
 * way (the stored variant: the GPT-2 with a fused float32 attention, the CNN
 * with its log_softmax in float32; docs/engine.md) within d->same, and
 * within half the distance from it to PyTorch rounding to the other 16-bit
 * format (and, for bf16, to PyTorch's float32): nearer its own format. */
static void check_forward(const model_case *c, const dtype_case *d, const ut_st_file *f32, const ut_st_file *amp,
                          const char *variant) {
    ut_model *m = build(c, f32);
    if (!m) return;
    const ut_st_tensor *ref32 = ut_st_get(f32, "logits");
    int64_t n = ut_st_numel(ref32);
    const float *ref16 = amp_ref(amp, c->name, d->name, "logits", n);
    const float *loss16 = amp_ref(amp, c->name, d->name, "loss", 1);
    ut_ctx *ctx = ut_ctx_new(&(ut_ctx_opts){0});
    ut_ctx_set_training(ctx, false);
    ut_ctx_set_autocast(ctx, d->dt);
    float *logits = ut_malloc_check((size_t)n * sizeof(float));
    double l = step(m, ctx, f32, logits, false);
    if (ref16 && loss16 && !isnan(l)) {
        double e16 = pt_rel_err(logits, ref16, n), e32 = pt_rel_err(logits, ref32->data, n);
        double torch_gap = pt_rel_err(ref16, ref32->data, n), el = fabs(l - loss16[0]) / fabs(loss16[0]);
        printf("     %s %s: logits vs torch-%s %.3g, vs torch-fp32 %.3g (torch-%s vs torch-fp32 %.3g); "
               "loss %.6f (torch %.6f, rel %.2g)\n",
               c->name, d->name, d->name, e16, e32, d->name, torch_gap, l, loss16[0], el);
        CHECK(e16 <= d->logits, "%s %s: logits %.3g from PyTorch's autocast (tolerance %.3g)", c->name, d->name,
              e16, d->logits);
        CHECK(el <= d->loss, "%s %s: loss %.7f, PyTorch's autocast %.7f", c->name, d->name, l, loss16[0]);
        const float *same = amp_ref(amp, c->name, d->name, variant, n);
        const float *wrong = amp_ref(amp, c->name, d->other, "logits", n);
        if (same && wrong) {
            double es = pt_rel_err(logits, same, n), ex = pt_rel_err(logits, wrong, n);
            printf("     %s %s vs torch-%s computed the same way (%s) %.3g; vs torch-%s %.3g\n", c->name, d->name,
                   d->name, variant, es, d->other, ex);
            CHECK(es <= d->same, "%s %s: %.3g from PyTorch computed the same way (tolerance %.3g)", c->name,
                  d->name, es, d->same);
            /* nearer its own format: less than half the distance between
             * PyTorch's two references, so (triangle inequality) nearer the
             * right one whatever the kernels' summation order (oneDNN's
             * convolution and OpenBLAS sum in other orders than PyTorch) */
            double gap = pt_rel_err(same, wrong, n);
            CHECK(es * 2 < gap, "%s %s: %.3g from PyTorch's %s, not within half its distance to its %s (%.3g)",
                  c->name, d->name, es, d->name, d->other, gap);
            if (d->vs_fp32 && c->vs_fp32) {
                double gap32 = pt_rel_err(same, ref32->data, n);
                CHECK(es * 2 < gap32, "%s %s: %.3g from PyTorch's %s, not within half its distance to its fp32 "
                      "(%.3g)", c->name, d->name, es, d->name, gap32);
            }
        }
    }
    ut_free(logits);
    ut_ctx_free(ctx);
    ut_model_free(m);
}

/* 10 AdamW steps from the same start: float32 master weights, forward and
 * backward under autocast. */
static void check_adamw(const model_case *c, const dtype_case *d, const ut_st_file *f32, const ut_st_file *amp) {
    ut_model *m = build(c, f32);
    if (!m) return;
    int64_t steps = ut_st_numel(ut_st_get(f32, "adamw_losses"));
    const float *ref = amp_ref(amp, c->name, d->name, "adamw_losses", steps);
    ut_optim_config cfg = ut_optim_defaults(UT_OPTIM_ADAMW);
    cfg.lr = 1e-3f, cfg.beta1 = 0.9f, cfg.beta2 = 0.999f, cfg.eps = 1e-8f, cfg.weight_decay = 0.01f;
    ut_optim *o = ut_optim_new(&cfg, m->params.flat, m->params.flat_grad, m->params.segs, m->params.n, 0, m->params.numel);
    ut_ctx *ctx = ut_ctx_new(&(ut_ctx_opts){0});
    ut_ctx_set_training(ctx, false);
    ut_ctx_set_autocast(ctx, d->dt);
    double scale = 0, worst = 0;
    for (int64_t s = 0; ref && s < steps; s++) scale = fmax(scale, fabs(ref[s]));
    ut_model_zero_grad(m);
    for (int64_t s = 0; ref && s < steps; s++) {
        ut_ctx_reset(ctx);
        double v = step(m, ctx, f32, NULL, true), e = fabs(v - ref[s]) / scale;
        CHECK(e <= d->adamw, "%s %s: AdamW step %lld: loss %.7f, PyTorch's autocast %.7f (%.3g of the largest)",
              c->name, d->name, (long long)s, v, ref[s], e);
        if (!(e <= worst)) worst = e;
        if (isnan(v)) break;
        ut_optim_step(o, cfg.lr);
        ut_model_zero_grad(m);
    }
    if (ref)
        printf("     %s %s: AdamW losses %.5f -> %.5f (torch %.5f), worst error %.2g of the largest\n", c->name,
               d->name, ref[0], ref[steps - 1], ref[steps - 1], worst);
    ut_optim_free(o);
    ut_ctx_free(ctx);
    ut_model_free(m);
}

static void check_model(const model_case *c, const char *variant) {
    ut_st_file *f32 = pt_open_fixture(c->name), *amp = pt_open_fixture("amp");
    for (size_t i = 0; f32 && amp && i < sizeof dtypes / sizeof dtypes[0]; i++) {
        check_forward(c, &dtypes[i], f32, amp, variant);
        check_adamw(c, &dtypes[i], f32, amp);
    }
    if (f32) ut_st_close(f32);
    if (amp) ut_st_close(amp);
}

static void test_gpt2(void) { check_model(&gpt2_case, "fused_attention.logits"); }
static void test_cnn(void) { check_model(&cnn_case, "fp32_log_softmax.logits"); }

int main(void) {
    RUN(test_gpt2);
    RUN(test_cnn);
    return TEST_SUMMARY();
}
