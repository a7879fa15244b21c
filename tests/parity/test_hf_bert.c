/* Hugging Face BERT parity: utrain's bert loaded from a model directory as
 * save_pretrained writes it (tests/parity/fixtures/hf_bert_tiny, made by
 * tests/parity/make_hf_fixtures.py with transformers' own
 * BertForSequenceClassification) gives transformers' logits, loss and every
 * parameter gradient on a batch with padding and a sentence pair, and 10
 * AdamW steps over Hugging Face Trainer's weight-decay groups. Also: the
 * bare encoder as sentence-transformers saves it (no "bert." prefix, no
 * classifier) loads with a new head, and bad directories are refused with
 * messages naming the file and the tensor. */
#include <string.h>
#include <sys/stat.h>

#include "proc.h"
#include "test.h"
#include "utrain/utrain.h"

#define FIX "tests/parity/fixtures/"
#define TOL 1e-4 /* max-abs error over max-abs value */
/* The key bias's gradient is zero in exact arithmetic (it adds the same
 * q . b_k to every key's score of a query, which softmax ignores): both sides
 * hold rounding noise (~1e-9), checked against this absolute bound instead. */
#define ZERO_GRAD 1e-7

static double rel_err(const float *a, const float *b, int64_t n) {
    double err = 0, ref = 0;
    for (int64_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - (double)b[i]);
        if (!(d <= err)) err = d;
        if (fabs((double)b[i]) > ref) ref = fabs((double)b[i]);
    }
    return ref > 0 ? err / ref : err;
}

static ut_model *load(const char *dir, const char *num_labels, char *err, size_t n) {
    ut_kv *kv = ut_kv_new();
    ut_kv_set(kv, "pretrained", dir);
    if (num_labels) ut_kv_set(kv, "num_labels", num_labels);
    ut_model *m = ut_model_create("bert", kv, 7, err, n);
    ut_kv_free(kv);
    return m;
}

static ut_tensor *stored(ut_ctx *ctx, const ut_st_tensor *t) {
    int64_t ne[4];
    for (int d = 0; d < t->ndim; d++) ne[d] = t->shape[d];
    return ut_tensor_from(ctx, t->dtype == UT_ST_I32 ? UT_I32 : UT_F32, t->ndim, ne, t->data);
}

static void test_logits_loss_grads(void) {
    char err[1024];
    ut_model *m = load(FIX "hf_bert_tiny", NULL, err, sizeof err);
    CHECK(m, "%s", err);
    ut_st_file *f = ut_st_open(FIX "hf_bert_tiny_batch.safetensors", err, sizeof err);
    CHECK(f, "%s", err);
    if (!m || !f) goto done;
    ut_ctx *ctx = ut_ctx_new(NULL);
    ut_ctx_set_training(ctx, false);
    ut_tensor *logits = ut_model_forward(m, ctx, stored(ctx, ut_st_get(f, "input")));
    ut_tensor *loss = ut_model_loss(m, ctx, logits, stored(ctx, ut_st_get(f, "labels")));
    CHECK(loss && ut_backward(ctx, loss) == 0, "%s", ut_ctx_error(ctx));
    if (loss) {
        const ut_st_tensor *rl = ut_st_get(f, "logits"), *rloss = ut_st_get(f, "loss");
        CHECK(ut_nelem(logits) == ut_st_numel(rl) && logits->ne[1] == 2, "logits shape");
        double e = rel_err(ut_f32(logits), rl->data, ut_st_numel(rl));
        CHECK(e < TOL, "logits: relative error %.3g", e);
        CHECK_NEAR(ut_f32(loss)[0], ((const float *)rloss->data)[0], 1e-4 * ((const float *)rloss->data)[0]);
        int checked = 0;
        for (int p = 0; p < m->params.n; p++) {
            char name[300];
            snprintf(name, sizeof name, "grad.%s", m->params.names[p]);
            const ut_st_tensor *g = ut_st_get(f, name);
            CHECK(g && ut_st_numel(g) == ut_nelem(m->params.t[p]), "%s: no such gradient", name);
            if (!g) continue;
            const float *ours = m->params.flat_grad + m->params.segs[p].offset;
            if (strstr(name, "attention.self.key.bias")) {
                for (int64_t i = 0; i < ut_st_numel(g); i++)
                    CHECK(fabsf(ours[i]) < ZERO_GRAD && fabsf(((const float *)g->data)[i]) < ZERO_GRAD,
                          "%s[%lld]: %g and %g, expected about 0", name, (long long)i, ours[i],
                          ((const float *)g->data)[i]);
            } else {
                e = rel_err(ours, g->data, ut_st_numel(g));
                CHECK(e < TOL, "%s: relative error %.3g", name, e);
            }
            checked++;
        }
        CHECK(checked == 41 && checked == m->params.n, "%d gradients checked of %d", checked, m->params.n);
    }
    ut_ctx_free(ctx);
done:
    ut_st_close(f);
    ut_model_free(m);
}

/* 10 AdamW steps (lr 1e-3, weight decay 0.01) on the batch against
 * torch.optim.AdamW over Hugging Face Trainer's groups: the model's decay
 * flags are exactly the Trainer's decayed names, and the losses and the
 * parameters after the steps agree (the key bias, whose gradient is noise,
 * aside) */
static void test_adamw_trainer_groups(void) {
    char err[1024];
    ut_model *m = load(FIX "hf_bert_tiny", NULL, err, sizeof err);
    ut_st_file *f = ut_st_open(FIX "hf_bert_tiny_batch.safetensors", err, sizeof err);
    CHECK(m && f, "%s", err);
    if (!m || !f) goto done;
    const char *decay = ut_st_meta(f, "decay");
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
    for (int s = 0; lt && s < ut_st_numel(lt); s++) {
        ut_ctx_reset(ctx);
        ut_model_zero_grad(m);
        ut_tensor *loss = ut_model_loss(m, ctx, ut_model_forward(m, ctx, stored(ctx, ut_st_get(f, "input"))),
                                        stored(ctx, ut_st_get(f, "labels")));
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
        if (!a || strstr(name, "attention.self.key.bias")) continue;
        double e = rel_err(m->params.flat + m->params.segs[p].offset, a->data, ut_st_numel(a));
        CHECK(e < TOL, "%s: relative error %.3g", name, e);
    }
    ut_ctx_free(ctx);
    ut_optim_free(o);
done:
    ut_st_close(f);
    ut_model_free(m);
}

/* training mode (hidden and attention dropout drawn): activation
 * checkpointing recomputes each layer with the same masks, so the gradients
 * are bit-identical to the plain run's, and dropout changes the loss */
static void test_checkpointing_with_dropout(void) {
    char err[1024];
    ut_st_file *f = ut_st_open(FIX "hf_bert_tiny_batch.safetensors", err, sizeof err);
    CHECK(f, "%s", err);
    ut_model *m[2] = {load(FIX "hf_bert_tiny", NULL, err, sizeof err),
                      load(FIX "hf_bert_tiny", NULL, err, sizeof err)};
    CHECK(m[0] && m[1], "%s", err);
    if (!f || !m[0] || !m[1]) goto done;
    m[1]->checkpoint_activations = true;
    float loss[2] = {0, 0};
    for (int r = 0; r < 2; r++) {
        ut_ctx *ctx = ut_ctx_new(&(ut_ctx_opts){.seed = 5});
        ut_tensor *l = ut_model_loss(m[r], ctx, ut_model_forward(m[r], ctx, stored(ctx, ut_st_get(f, "input"))),
                                     stored(ctx, ut_st_get(f, "labels")));
        CHECK(l && ut_backward(ctx, l) == 0, "%s", ut_ctx_error(ctx));
        if (l) loss[r] = ut_f32(l)[0];
        ut_ctx_free(ctx);
    }
    CHECK(loss[0] == loss[1], "losses %.9g and %.9g", loss[0], loss[1]);
    CHECK(fabs(loss[0] - ((const float *)ut_st_get(f, "loss")->data)[0]) > 1e-4, "dropout left the loss as in eval");
    CHECK(!memcmp(m[0]->params.flat_grad, m[1]->params.flat_grad, (size_t)m[0]->params.numel * sizeof(float)),
          "checkpointed gradients differ");
done:
    ut_st_close(f);
    ut_model_free(m[0]);
    ut_model_free(m[1]);
}

/* bf16 and fp16 autocast (the padding mask's -FLT_MAX rounds to -inf there):
 * finite logits and loss close to transformers' float32 ones */
static void test_autocast(void) {
    char err[1024];
    ut_model *m = load(FIX "hf_bert_tiny", NULL, err, sizeof err);
    ut_st_file *f = ut_st_open(FIX "hf_bert_tiny_batch.safetensors", err, sizeof err);
    CHECK(m && f, "%s", err);
    ut_dtype dts[2] = {UT_BF16, UT_F16};
    for (int i = 0; m && f && i < 2; i++) {
        ut_ctx *ctx = ut_ctx_new(NULL);
        ut_ctx_set_training(ctx, false);
        ut_ctx_set_autocast(ctx, dts[i]);
        ut_tensor *logits = ut_model_forward(m, ctx, stored(ctx, ut_st_get(f, "input")));
        ut_tensor *loss = ut_model_loss(m, ctx, logits, stored(ctx, ut_st_get(f, "labels")));
        CHECK(loss && ut_backward(ctx, loss) == 0, "%s", ut_ctx_error(ctx));
        if (loss) {
            const ut_st_tensor *rl = ut_st_get(f, "logits");
            const ut_tensor *l32 = ut_tensor_to(ctx, logits, UT_F32);
            double e = rel_err(ut_f32(l32), rl->data, ut_st_numel(rl));
            CHECK(e < 0.05, "%s logits: relative error %.3g", ut_dtype_name(dts[i]), e);
            CHECK(isfinite(ut_f32(loss)[0]) &&
                      fabs(ut_f32(loss)[0] - ((const float *)ut_st_get(f, "loss")->data)[0]) < 0.01,
                  "%s loss %g", ut_dtype_name(dts[i]), ut_f32(loss)[0]);
        }
        ut_model_zero_grad(m);
        ut_ctx_free(ctx);
    }
    ut_st_close(f);
    ut_model_free(m);
}

/* sentence-transformers' layout: encoder tensors without "bert.", no
 * classifier: the head is new, N(0, initializer_range) weights and zero bias */
static void test_bare_encoder_new_head(void) {
    char err[1024];
    ut_model *full = load(FIX "hf_bert_tiny", NULL, err, sizeof err);
    ut_model *bare = load(FIX "hf_bert_tiny_base", "2", err, sizeof err);
    CHECK(full && bare, "%s", err);
    if (!full || !bare) goto done;
    const char *same[] = {"bert.embeddings.word_embeddings.weight", "bert.encoder.layer.1.output.dense.weight",
                          "bert.pooler.dense.bias"};
    for (int i = 0; i < 3; i++) {
        ut_tensor *a = ut_model_param(full, same[i]), *b = ut_model_param(bare, same[i]);
        CHECK(a && b && ut_nelem(a) == ut_nelem(b) &&
                  !memcmp(ut_f32(a), ut_f32(b), (size_t)ut_nelem(a) * sizeof(float)),
              "%s differs", same[i]);
    }
    ut_tensor *w = ut_model_param(bare, "classifier.weight"), *b = ut_model_param(bare, "classifier.bias");
    CHECK(w && w->ne[0] == 2 && w->ne[1] == 32, "classifier (2, 32)");
    double ss = 0;
    for (int64_t i = 0; w && i < ut_nelem(w); i++) ss += (double)ut_f32(w)[i] * ut_f32(w)[i];
    double sd = w ? sqrt(ss / (double)ut_nelem(w)) : 0;
    CHECK(sd > 0.014 && sd < 0.026, "classifier weight std %.4f, expected about 0.02", sd);
    CHECK(b && ut_f32(b)[0] == 0.0f && ut_f32(b)[1] == 0.0f, "classifier bias zero");
done:
    ut_model_free(full);
    ut_model_free(bare);
}

/* ---- bad directories ---- */
static void copy_file(const char *from, const char *to, long keep) {
    char *s = tp_slurp(from);
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
    free(s);
}

static void write_text(const char *path, const char *text) {
    FILE *f = fopen(path, "w");
    UT_ASSERT(f);
    fputs(text, f);
    fclose(f);
}

/* loading dir must fail with a message containing every part */
static void refused(const char *dir, const char *const *parts) {
    char err[1024] = "";
    ut_model *m = load(dir, NULL, err, sizeof err);
    CHECK(!m, "%s loaded", dir);
    for (int i = 0; parts[i]; i++) CHECK(strstr(err, parts[i]), "'%s' not in: %s", parts[i], err);
    ut_model_free(m);
}

/* a copy of hf_bert_tiny's config.json with one replacement */
static void config_with(const char *dir, const char *from, const char *to) {
    char path[600], *s = tp_slurp(FIX "hf_bert_tiny/config.json");
    UT_ASSERT(s && strstr(s, from));
    char *at = strstr(s, from);
    snprintf(path, sizeof path, "%s/config.json", dir);
    FILE *f = fopen(path, "w");
    fprintf(f, "%.*s%s%s", (int)(at - s), s, to, at + strlen(from));
    fclose(f);
    free(s);
}

static void test_bad_directories(void) {
    char d[256], p[600];
    UT_ASSERT(tp_make_tmpdir(d, sizeof d, "hfbad"));
    refused("/nonexistent/model", (const char *[]){"/nonexistent/model", "not a directory", NULL});
    refused(d, (const char *[]){d, "no config.json", NULL});
    config_with(d, "\"model_type\": \"bert\"", "\"model_type\": \"t5\"");
    refused(d, (const char *[]){"config.json", "model_type 't5'", NULL});
    config_with(d, "\"hidden_act\": \"gelu\"", "\"hidden_act\": \"swish\"");
    refused(d, (const char *[]){"hidden_act 'swish'", NULL});
    config_with(d, "x", "x");
    refused(d, (const char *[]){"no model.safetensors", NULL});
    snprintf(p, sizeof p, "%s/pytorch_model.bin", d);
    write_text(p, "pickle");
    refused(d, (const char *[]){"pytorch_model.bin", "safetensors", NULL});
    /* a checkpoint for another size: the first tensor's shape is named */
    config_with(d, "\"hidden_size\": 32", "\"hidden_size\": 16");
    snprintf(p, sizeof p, "%s/model.safetensors", d);
    copy_file(FIX "hf_bert_tiny/model.safetensors", p, -1);
    refused(d, (const char *[]){"model.safetensors", "tensor 'bert.embeddings.word_embeddings.weight' has shape (100, 32), the model needs (100, 16)", NULL});
    /* one more layer than the file has: the missing tensor is named */
    config_with(d, "\"num_hidden_layers\": 2", "\"num_hidden_layers\": 3");
    refused(d, (const char *[]){"'bert.encoder.layer.2.attention.self.query.weight' is missing", NULL});
    /* cut short */
    config_with(d, "x", "x");
    copy_file(FIX "hf_bert_tiny/model.safetensors", p, 5000);
    refused(d, (const char *[]){"model.safetensors", NULL});
    tp_finish(0, d);
}

int main(int argc, char **argv) {
    (void)argc;
    tp_set_program(argv[0]);
    RUN(test_logits_loss_grads);
    RUN(test_adamw_trainer_groups);
    RUN(test_checkpointing_with_dropout);
    RUN(test_autocast);
    RUN(test_bare_encoder_new_head);
    RUN(test_bad_directories);
    return TEST_SUMMARY();
}
