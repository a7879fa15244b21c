/* Checks shared by the Hugging Face parity tests (tests/parity/test_hf_*.c):
 * a model's logits, loss, every parameter gradient and 10 AdamW steps
 * against a fixture batch file that tests/parity/make_hf*_fixtures.py writes
 * (input, labels, logits, loss, grad.<name>, adamw_losses, after.<name>,
 * metadata "decay"), and file helpers for bad-directory tests.
 * Include after test.h: the checks record failures with CHECK.
 * defines: hfp_value, hfp_check_batch, hfp_check_adamw, hfp_train_loss,
 *          hfp_copy_file, hfp_config_with, hfp_load, hfp_check_checkpointing,
 *          hfp_check_autocast, hfp_refused, hfp_check_cut_short,
 *          hfp_check_padded_path, hfp_gen_case, hfp_check_generation. */
#ifndef UTRAIN_TEST_HF_PARITY_H
#define UTRAIN_TEST_HF_PARITY_H
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "parity.h"
#include "proc.h"
#include "utrain/utrain.h"

#define HFP_TOL 1e-4 /* max-abs error over max-abs value */
/* A key projection's bias gets a gradient that is zero in exact arithmetic
 * (it adds the same q . b_k to every key's score of a query, which softmax
 * ignores): both sides hold rounding noise (~1e-9), checked against this
 * absolute bound instead, and left out of the comparison after AdamW steps. */
#define HFP_ZERO_GRAD 1e-7

/* element i of a fixture's float tensor name (0 when it is not there) */
static inline float hfp_value(const ut_st_file *f, const char *name, int64_t i) {
    const ut_st_tensor *t = ut_st_get(f, name);
    float v = 0;
    if (t && i < ut_st_numel(t)) memcpy(&v, (const char *)t->data + 4 * i, sizeof v);
    return v;
}

static inline void hfp_check_grad(const ut_model *m, int p, const ut_st_file *f, const char *zero_bias) {
    char name[300];
    snprintf(name, sizeof name, "grad.%s", m->params.names[p]);
    const ut_st_tensor *g = ut_st_get(f, name);
    CHECK(g && ut_st_numel(g) == ut_nelem(m->params.t[p]), "%s: no such gradient", name);
    if (!g) return;
    const float *ours = m->params.flat_grad + m->params.segs[p].offset, *ref = g->data;
    if (zero_bias && strstr(name, zero_bias)) {
        for (int64_t i = 0; i < ut_st_numel(g); i++)
            CHECK(fabsf(ours[i]) < HFP_ZERO_GRAD && fabsf(ref[i]) < HFP_ZERO_GRAD,
                  "%s[%lld]: %g and %g, expected about 0", name, (long long)i, ours[i], ref[i]);
        return;
    }
    double e = pt_rel_err(ours, ref, ut_st_numel(g));
    CHECK(e < HFP_TOL, "%s: relative error %.3g", name, e);
}

/* Eval-mode forward, loss and backward of m on the fixture batch: logits
 * and loss within HFP_TOL and every parameter's gradient (names containing
 * zero_bias: about 0 on both sides). Returns the number of gradients checked. */
static inline int hfp_check_batch(ut_model *m, const ut_st_file *f, const char *zero_bias) {
    ut_ctx *ctx = ut_ctx_new(NULL);
    ut_ctx_set_training(ctx, false);
    ut_model_zero_grad(m);
    ut_tensor *logits = ut_model_forward(m, ctx, pt_stored(ctx, ut_st_get(f, "input")));
    ut_tensor *loss = ut_model_loss(m, ctx, logits, pt_stored(ctx, ut_st_get(f, "labels")));
    CHECK(loss && ut_backward(ctx, loss) == 0, "%s", ut_ctx_error(ctx));
    int checked = 0;
    if (loss) {
        const ut_st_tensor *rl = ut_st_get(f, "logits"), *rloss = ut_st_get(f, "loss");
        CHECK(ut_nelem(logits) == ut_st_numel(rl) && logits->ne[1] == rl->shape[1], "logits shape");
        double e = pt_rel_err(ut_f32(logits), rl->data, ut_st_numel(rl));
        CHECK(e < HFP_TOL, "logits: relative error %.3g", e);
        float ref = ((const float *)rloss->data)[0];
        CHECK_NEAR(ut_f32(loss)[0], ref, 1e-4 * ref);
        for (int p = 0; p < m->params.n; p++, checked++) hfp_check_grad(m, p, f, zero_bias);
    }
    ut_ctx_free(ctx);
    return checked;
}

/* 10 AdamW steps (lr 1e-3, weight decay 0.5) on the batch against
 * torch.optim.AdamW over Hugging Face Trainer's groups: the model's decay
 * flags are exactly the fixture's decayed names, the losses before each step
 * and the parameters after the steps agree (names containing zero_bias aside). */
static inline void hfp_check_adamw(ut_model *m, const ut_st_file *f, const char *zero_bias) {
    const char *decay = ut_st_meta(f, "decay");
    CHECK(decay, "no decay names in the fixture");
    for (int p = 0; decay && p < m->params.n; p++) {
        char quoted[300];
        snprintf(quoted, sizeof quoted, "\"%s\"", m->params.names[p]);
        CHECK(m->params.segs[p].decay == (strstr(decay, quoted) != NULL), "%s: decay %d", m->params.names[p],
              m->params.segs[p].decay);
    }
    ut_optim_config cfg = ut_optim_defaults(UT_OPTIM_ADAMW);
    cfg.lr = 1e-3f;
    cfg.weight_decay = 0.5f;
    ut_optim *o = ut_optim_new(&cfg, m->params.flat, m->params.flat_grad, m->params.segs, m->params.n, 0,
                               m->params.numel);
    ut_ctx *ctx = ut_ctx_new(NULL);
    ut_ctx_set_training(ctx, false);
    const ut_st_tensor *lt = ut_st_get(f, "adamw_losses");
    CHECK(lt && ut_st_numel(lt) == 10, "adamw_losses");
    for (int s = 0; lt && s < ut_st_numel(lt); s++) {
        ut_ctx_reset(ctx);
        ut_model_zero_grad(m);
        ut_tensor *loss = ut_model_loss(m, ctx, ut_model_forward(m, ctx, pt_stored(ctx, ut_st_get(f, "input"))),
                                        pt_stored(ctx, ut_st_get(f, "labels")));
        CHECK(loss && ut_backward(ctx, loss) == 0, "%s", ut_ctx_error(ctx));
        if (!loss) break;
        float ref = ((const float *)lt->data)[s];
        CHECK(fabs(ut_f32(loss)[0] - ref) <= 1e-4 * ref, "step %d: loss %.7f, transformers %.7f", s,
              ut_f32(loss)[0], ref);
        ut_optim_step(o, cfg.lr);
    }
    for (int p = 0; p < m->params.n; p++) {
        char name[300];
        snprintf(name, sizeof name, "after.%s", m->params.names[p]);
        const ut_st_tensor *a = ut_st_get(f, name);
        CHECK(a && ut_st_numel(a) == ut_nelem(m->params.t[p]), "%s", name);
        if (!a || (zero_bias && strstr(name, zero_bias))) continue;
        double e = pt_rel_err(m->params.flat + m->params.segs[p].offset, a->data, ut_st_numel(a));
        CHECK(e < HFP_TOL, "%s: relative error %.3g", name, e);
    }
    ut_ctx_free(ctx);
    ut_optim_free(o);
}

/* The loss of m on the fixture batch, with its backward: in training mode
 * (dropout drawn from seed 5) for UT_F32, else in eval mode under autocast
 * to that dtype, whose logits are checked within 5% of the fixture's. */
static inline float hfp_train_loss(ut_model *m, const ut_st_file *f, ut_dtype autocast) {
    ut_ctx *ctx = ut_ctx_new(&(ut_ctx_opts){.seed = 5});
    if (autocast != UT_F32) {
        ut_ctx_set_training(ctx, false);
        ut_ctx_set_autocast(ctx, autocast);
    }
    ut_tensor *logits = ut_model_forward(m, ctx, pt_stored(ctx, ut_st_get(f, "input")));
    ut_tensor *l = ut_model_loss(m, ctx, logits, pt_stored(ctx, ut_st_get(f, "labels")));
    CHECK(l && ut_backward(ctx, l) == 0, "%s", ut_ctx_error(ctx));
    float v = l ? ut_f32(l)[0] : NAN;
    if (l && autocast != UT_F32) {
        const ut_st_tensor *rl = ut_st_get(f, "logits");
        double e = pt_rel_err(ut_f32(ut_tensor_to(ctx, logits, UT_F32)), rl->data, ut_st_numel(rl));
        CHECK(e < 0.05, "%s logits: relative error %.3g", ut_dtype_name(autocast), e);
    }
    ut_ctx_free(ctx);
    return v;
}

/* Copies from to to, only its first keep bytes when keep >= 0. */
static inline void hfp_copy_file(const char *from, const char *to, long keep) {
    FILE *in = fopen(from, "rb"), *out = fopen(to, "wb");
    UT_ASSERT(in && out);
    char buf[65536];
    long left = keep;
    for (size_t got; (got = fread(buf, 1, sizeof buf, in)) > 0;) {
        size_t put = keep < 0 || (long)got <= left ? got : (size_t)left;
        fwrite(buf, 1, put, out);
        left -= (long)put;
    }
    fclose(in);
    fclose(out);
}

/* dir/config.json: a copy of the file src with the first from replaced by to */
static inline void hfp_config_with(const char *src, const char *dir, const char *from, const char *to) {
    char path[600], *s = tp_slurp(src);
    UT_ASSERT(s && strstr(s, from));
    char *at = strstr(s, from);
    snprintf(path, sizeof path, "%s/config.json", dir);
    FILE *f = fopen(path, "w");
    UT_ASSERT(f);
    fprintf(f, "%.*s%s%s", (int)(at - s), s, to, at + strlen(from));
    fclose(f);
    free(s);
}

/* model NAME (seed 7) with pretrained DIR unless NULL and the options
 * opts: key, value, ..., NULL (a pair with a NULL value left out) */
static inline ut_model *hfp_load(const char *name, const char *dir, const char *const *opts, char *err, size_t n) {
    ut_kv *kv = ut_kv_new();
    if (dir) ut_kv_set(kv, "pretrained", dir);
    for (int i = 0; opts && opts[i]; i += 2)
        if (opts[i + 1]) ut_kv_set(kv, opts[i], opts[i + 1]);
    ut_model *m = ut_model_create(name, kv, 7, err, n);
    ut_kv_free(kv);
    return m;
}

/* Training mode with dropout, model NAME from DIR (options opts) twice, the
 * second with activation checkpointing, on the fixture batch file BATCH:
 * recomputing each layer draws the same masks, so the losses and gradients
 * are bit-identical, and dropout moves the loss away from the fixture's
 * eval-mode one. */
static inline void hfp_check_checkpointing(const char *name, const char *dir, const char *const *opts,
                                           const char *batch) {
    char err[1024];
    ut_st_file *f = ut_st_open(batch, err, sizeof err);
    ut_model *m[2] = {hfp_load(name, dir, opts, err, sizeof err), hfp_load(name, dir, opts, err, sizeof err)};
    CHECK(f && m[0] && m[1], "%s", err);
    if (f && m[0] && m[1]) {
        m[1]->checkpoint_activations = true;
        float loss[2] = {hfp_train_loss(m[0], f, UT_F32), hfp_train_loss(m[1], f, UT_F32)};
        CHECK(loss[0] == loss[1], "losses %.9g and %.9g", loss[0], loss[1]);
        CHECK(fabs(loss[0] - hfp_value(f, "loss", 0)) > 1e-4, "dropout left the loss as in eval");
        CHECK(!memcmp(m[0]->params.flat_grad, m[1]->params.flat_grad, (size_t)m[0]->params.numel * sizeof(float)),
              "checkpointed gradients differ");
    }
    ut_st_close(f);
    ut_model_free(m[0]);
    ut_model_free(m[1]);
}

/* model NAME from DIR (options opts) on the fixture batch file BATCH under bf16 and fp16
 * autocast: logits within 5% of the fixture's float32 ones, a finite loss
 * within 0.01 of its loss */
static inline void hfp_check_autocast(const char *name, const char *dir, const char *const *opts,
                                      const char *batch) {
    char err[1024];
    ut_model *m = hfp_load(name, dir, opts, err, sizeof err);
    ut_st_file *f = ut_st_open(batch, err, sizeof err);
    CHECK(m && f, "%s", err);
    ut_dtype dts[2] = {UT_BF16, UT_F16};
    for (int i = 0; m && f && i < 2; i++) {
        float loss = hfp_train_loss(m, f, dts[i]);
        CHECK(isfinite(loss) && fabs(loss - hfp_value(f, "loss", 0)) < 0.01, "%s loss %g", ut_dtype_name(dts[i]),
              loss);
        ut_model_zero_grad(m);
    }
    ut_st_close(f);
    ut_model_free(m);
}

/* model NAME with pretrained DIR must fail with a message holding every part */
static inline void hfp_refused(const char *name, const char *dir, const char *const *parts) {
    char err[1024] = "";
    ut_model *m = hfp_load(name, dir, NULL, err, sizeof err);
    CHECK(!m, "%s loaded", dir);
    for (int i = 0; parts[i]; i++) CHECK(strstr(err, parts[i]), "'%s' not in: %s", parts[i], err);
    ut_model_free(m);
}

/* dir/model.safetensors cut short (its first 5000 bytes of from, config.json
 * from a copy of the fixture's): model NAME refuses it naming the file */
static inline void hfp_check_cut_short(const char *name, const char *dir, const char *fixture) {
    char path[600], cfg[600];
    snprintf(cfg, sizeof cfg, "%s/config.json", fixture);
    hfp_config_with(cfg, dir, "{", "{");
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    snprintf(cfg, sizeof cfg, "%s/model.safetensors", fixture);
    hfp_copy_file(cfg, path, 5000);
    hfp_refused(name, dir, (const char *const[]){"model.safetensors", NULL});
}
/* Models that compute only the real tokens keep the padded computation for
 * batches they cannot pack (a left-padded row): the fixture batch's
 * right-padded row 1, one padding column longer, next to the same row shifted
 * right (left padding) gives the fixture's logits for that row (the padded
 * path), and so does it alone in its batch (the packed path); the shifted
 * row's logits are finite. */
static inline void hfp_check_padded_path(ut_model *m, const ut_st_file *f) {
    const ut_st_tensor *in = ut_st_get(f, "input"), *rl = ut_st_get(f, "logits");
    const int32_t *x = in->data;
    int64_t T = in->shape[2], K = rl->shape[1], U = T + 1;
    int32_t *h = calloc((size_t)(2 * 3 * U), sizeof *h);
    for (int p = 0; p < 3; p++)
        for (int64_t t = 0; t < T; t++) {
            h[p * U + t] = x[(3 + p) * T + t];           /* row 1, then one more padding column */
            h[(3 + p) * U + t + 1] = x[(3 + p) * T + t]; /* row 1 shifted right */
        }
    for (int p = 0; p < 2; p++) { /* padding ids (the last column's) where the rows were widened */
        h[p * U + T] = x[(3 + p) * T + T - 1];
        h[(3 + p) * U] = x[(3 + p) * T + T - 1];
    }
    ut_ctx *ctx = ut_ctx_new(NULL);
    ut_ctx_set_training(ctx, false);
    ut_tensor *both = ut_model_forward(m, ctx, ut_tensor_from(ctx, UT_I32, 3, (int64_t[]){2, 3, U}, h));
    ut_tensor *alone = ut_model_forward(m, ctx, ut_tensor_from(ctx, UT_I32, 3, (int64_t[]){1, 3, U}, h));
    CHECK(both && alone, "%s", ut_ctx_error(ctx));
    if (both && alone) {
        const float *ref = (const float *)rl->data + K;
        double e1 = pt_rel_err(ut_f32(both), ref, K), e2 = pt_rel_err(ut_f32(alone), ref, K);
        CHECK(e1 < HFP_TOL && e2 < HFP_TOL, "row 1: relative error %.3g padded path, %.3g packed", e1, e2);
        for (int64_t k = 0; k < K; k++)
            CHECK(isfinite(ut_f32(both)[K + k]), "left-padded logit %g", ut_f32(both)[K + k]);
    }
    ut_ctx_free(ctx);
    free(h);
}

/* A generation case of a fixture (make_hf_*_gen / t5 scripts): its name
 * (gen.<name> holds transformers' tokens, (B, max_new) padded with pad)
 * and options. */
typedef struct {
    const char *name;
    int beams, early;
    double lp;
    int64_t ngram, min_new, bos, eos, max_new;
} hfp_gen_case;

/* ut_generate on the fixture batch's sources (input planes 0 and 1) under
 * each case gives transformers' tokens, and lens up to and including the
 * end of sequence eos (all max_new when it never came). */
static inline void hfp_check_generation(ut_model *m, const ut_st_file *f, const hfp_gen_case *cases, int ncases,
                                        bool no_cache, int32_t eos) {
    char err[1024];
    const ut_st_tensor *in = ut_st_get(f, "input");
    CHECK(in && in->ndim == 3 && in->shape[1] == 4, "the fixture has no input planes");
    if (!in) return;
    int64_t B = in->shape[0], L = in->shape[2];
    int32_t *src = malloc((size_t)(B * L) * sizeof *src), *mask = malloc((size_t)(B * L) * sizeof *mask);
    const int32_t *x = in->data;
    for (int64_t b = 0; b < B; b++)
        for (int64_t t = 0; t < L; t++) src[b * L + t] = x[(b * 4) * L + t], mask[b * L + t] = x[(b * 4 + 1) * L + t];
    for (int c = 0; c < ncases; c++) {
        ut_gen_opts o;
        ut_gen_opts_init(&o);
        o.num_beams = cases[c].beams, o.early_stopping = cases[c].early, o.length_penalty = cases[c].lp;
        o.no_repeat_ngram_size = cases[c].ngram, o.min_new_tokens = cases[c].min_new;
        o.forced_bos = cases[c].bos, o.forced_eos = cases[c].eos, o.max_new_tokens = cases[c].max_new;
        o.no_cache = no_cache;
        int64_t M = o.max_new_tokens;
        int32_t *out = malloc((size_t)(B * M) * sizeof *out);
        int64_t *lens = malloc((size_t)B * sizeof *lens);
        int rc = ut_generate(m, &o, src, mask, B, L, out, lens, err, sizeof err);
        CHECK(rc == 0, "%s: %s", cases[c].name, err);
        char name[96];
        snprintf(name, sizeof name, "gen.%s", cases[c].name);
        const ut_st_tensor *ref = ut_st_get(f, name);
        CHECK(ref && ut_st_numel(ref) == B * M, "%s: no reference", name);
        for (int64_t b = 0; !rc && ref && b < B; b++) {
            const int32_t *r = (const int32_t *)ref->data + b * M;
            char got[512] = "", want[512] = "";
            int64_t want_len = M;
            for (int64_t i = 0; i < M; i++) {
                snprintf(got + strlen(got), sizeof got - strlen(got), " %d", out[b * M + i]);
                snprintf(want + strlen(want), sizeof want - strlen(want), " %d", r[i]);
                if (r[i] == eos && want_len == M) want_len = i + 1;
            }
            CHECK(!strcmp(got, want), "%s%s row %lld:%s, transformers:%s", cases[c].name, no_cache ? " (no cache)" : "",
                  (long long)b, got, want);
            CHECK(lens[b] == want_len, "%s row %lld: %lld tokens, expected %lld", cases[c].name, (long long)b,
                  (long long)lens[b], (long long)want_len);
        }
        free(out);
        free(lens);
    }
    free(src);
    free(mask);
}

#endif
