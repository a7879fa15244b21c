/* Shared checks of the Hugging Face sequence-classification parity tests
 * (tests/parity/test_hf_roberta.c, test_hf_gpt2_cls.c): a model against a
 * batch file written by tests/parity/make_hf_cls_fixtures.py (input, labels,
 * logits, loss, grad.<name>, adamw_losses, after.<name>, metadata "decay").
 * Header-only so CHECK counts in the including test.
 * defines: hp_rel_err, hp_stored, hp_check_forward, hp_check_adamw. */
#ifndef UTRAIN_HF_PARITY_H
#define UTRAIN_HF_PARITY_H
#include <string.h>

#include "test.h"
#include "utrain/utrain.h"

#define HP_TOL 1e-4 /* max-abs error over max-abs value */

static inline double hp_rel_err(const float *a, const float *b, int64_t n) {
    double err = 0, ref = 0;
    for (int64_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - (double)b[i]);
        if (!(d <= err)) err = d;
        if (fabs((double)b[i]) > ref) ref = fabs((double)b[i]);
    }
    return ref > 0 ? err / ref : err;
}

static inline ut_tensor *hp_stored(ut_ctx *ctx, const ut_st_file *f, const char *name) {
    const ut_st_tensor *t = ut_st_get(f, name);
    if (!t) return NULL;
    int64_t ne[4];
    for (int d = 0; d < t->ndim; d++) ne[d] = t->shape[d];
    return ut_tensor_from(ctx, t->dtype == UT_ST_I32 ? UT_I32 : UT_F32, t->ndim, ne, t->data);
}

static inline float hp_value(const ut_st_file *f, const char *name, int64_t i) {
    const ut_st_tensor *t = ut_st_get(f, name);
    float v = 0;
    if (t && i < ut_st_numel(t)) memcpy(&v, (const char *)t->data + 4 * i, sizeof v);
    return v;
}

/* tensors of names containing `noise` (a gradient zero in exact arithmetic,
 * as the key bias's) are compared with an absolute bound of 1e-6 */
static inline void hp_compare(const float *ours, const ut_st_tensor *ref, const char *name, const char *noise) {
    if (noise && strstr(name, noise)) {
        for (int64_t i = 0; i < ut_st_numel(ref); i++)
            CHECK(fabsf(ours[i] - ((const float *)ref->data)[i]) < 1e-6f, "%s[%lld]: %g vs %g", name,
                  (long long)i, ours[i], ((const float *)ref->data)[i]);
        return;
    }
    double e = hp_rel_err(ours, ref->data, ut_st_numel(ref));
    CHECK(e < HP_TOL, "%s: relative error %.3g", name, e);
}

/* eval mode: logits, loss and every parameter gradient; nparams expected */
static inline void hp_check_forward(ut_model *m, const ut_st_file *f, int nparams, const char *noise) {
    ut_ctx *ctx = ut_ctx_new(NULL);
    ut_ctx_set_training(ctx, false);
    ut_model_zero_grad(m);
    ut_tensor *logits = ut_model_forward(m, ctx, hp_stored(ctx, f, "input"));
    ut_tensor *loss = ut_model_loss(m, ctx, logits, hp_stored(ctx, f, "labels"));
    CHECK(loss && ut_backward(ctx, loss) == 0, "%s", ut_ctx_error(ctx));
    if (loss) {
        const ut_st_tensor *rl = ut_st_get(f, "logits");
        CHECK(ut_nelem(logits) == ut_st_numel(rl) && logits->ndim == 2, "logits shape");
        if (ut_nelem(logits) == ut_st_numel(rl)) hp_compare(ut_f32(logits), rl, "logits", NULL);
        CHECK_NEAR(ut_f32(loss)[0], hp_value(f, "loss", 0), 1e-4 * hp_value(f, "loss", 0));
        int checked = 0;
        for (int p = 0; p < m->params.n; p++) {
            char name[300];
            snprintf(name, sizeof name, "grad.%s", m->params.names[p]);
            const ut_st_tensor *g = ut_st_get(f, name);
            CHECK(g && ut_st_numel(g) == ut_nelem(m->params.t[p]), "%s: no such gradient", name);
            if (!g) continue;
            hp_compare(m->params.grad + m->params.segs[p].offset, g, name, noise);
            checked++;
        }
        CHECK(checked == nparams && checked == m->params.n, "%d gradients checked of %d", checked,
              m->params.n);
    }
    ut_ctx_free(ctx);
}

/* 10 AdamW steps (lr 1e-3, weight decay 0.5) over Hugging Face Trainer's
 * groups: the model's decay flags are the Trainer's names, and the losses and
 * the parameters after the steps agree */
static inline void hp_check_adamw(ut_model *m, const ut_st_file *f, const char *noise) {
    const char *decay = ut_st_meta(f, "decay");
    CHECK(decay, "no decay metadata");
    for (int p = 0; decay && p < m->params.n; p++) {
        char quoted[300];
        snprintf(quoted, sizeof quoted, "\"%s\"", m->params.names[p]);
        CHECK(m->params.segs[p].decay == (strstr(decay, quoted) != NULL), "%s: decay %d", m->params.names[p],
              m->params.segs[p].decay);
    }
    ut_optim_config cfg = ut_optim_defaults(UT_OPTIM_ADAMW);
    cfg.lr = 1e-3f;
    cfg.weight_decay = 0.5f;
    ut_optim *o = ut_optim_new(&cfg, m->params.data, m->params.grad, m->params.segs, m->params.n, 0,
                               m->params.numel);
    ut_ctx *ctx = ut_ctx_new(NULL);
    ut_ctx_set_training(ctx, false);
    const ut_st_tensor *lt = ut_st_get(f, "adamw_losses");
    CHECK(lt && ut_st_numel(lt) == 10, "adamw_losses");
    for (int s = 0; lt && s < ut_st_numel(lt); s++) {
        ut_ctx_reset(ctx);
        ut_model_zero_grad(m);
        ut_tensor *loss = ut_model_loss(m, ctx, ut_model_forward(m, ctx, hp_stored(ctx, f, "input")),
                                        hp_stored(ctx, f, "labels"));
        CHECK(loss && ut_backward(ctx, loss) == 0, "%s", ut_ctx_error(ctx));
        if (!loss) break;
        float ref = hp_value(f, "adamw_losses", s);
        CHECK(fabs(ut_f32(loss)[0] - ref) <= 1e-4 * ref, "step %d: loss %.7f, transformers %.7f", s,
              ut_f32(loss)[0], ref);
        ut_optim_step(o, cfg.lr);
    }
    for (int p = 0; p < m->params.n; p++) {
        char name[300];
        snprintf(name, sizeof name, "after.%s", m->params.names[p]);
        const ut_st_tensor *a = ut_st_get(f, name);
        CHECK(a && ut_st_numel(a) == ut_nelem(m->params.t[p]), "%s", name);
        if (a && !(noise && strstr(name, noise))) hp_compare(m->params.data + m->params.segs[p].offset, a, name, NULL);
    }
    ut_ctx_free(ctx);
    ut_optim_free(o);
}
#endif
