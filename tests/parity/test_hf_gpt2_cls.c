/* Hugging Face GPT2ForSequenceClassification parity: utrain's gpt2 with
 * model.task: sequence_classification, loaded from
 * tests/parity/fixtures/hf_gpt2_cls_tiny (made by
 * tests/parity/make_hf_cls_fixtures.py with transformers' own class), gives
 * transformers' logits, loss and every gradient on a right-padded batch (the
 * score head reads each row's last token that is not pad_token_id; padded
 * keys are masked under the causal mask), and 10 AdamW steps. Also: an LM
 * directory gets a new score head initialised as transformers does; without
 * pad_token_id a batch of more than one row is refused as transformers
 * refuses it; checkpointing with dropout gives the plain run's gradients. */
#include <string.h>

#include "test.h"
#include "hf_parity.h"

#define FIX "tests/parity/fixtures/"
#define BATCH FIX "hf_gpt2_cls_tiny_batch.safetensors"

static ut_model *load(const char *dir, const char *key, const char *val, char *err, size_t n) {
    return hfp_load("gpt2", dir, (const char *const[]){"task", "sequence_classification", key, val, NULL}, err, n);
}

static void test_logits_loss_grads(void) {
    char err[1024];
    ut_model *m = load(FIX "hf_gpt2_cls_tiny", NULL, NULL, err, sizeof err);
    ut_st_file *f = ut_st_open(BATCH, err, sizeof err);
    CHECK(m && f, "%s", err);
    if (m && f) CHECK(hfp_check_batch(m, f, NULL) == 29, "gradients checked");
    ut_st_close(f);
    ut_model_free(m);
}

/* c_attn.bias's key third has a gradient that is zero in exact arithmetic
 * (rounding noise on both sides, which AdamW scales to full steps): its query
 * and value thirds are compared on their own */
static void test_adamw_trainer_groups(void) {
    char err[1024];
    ut_model *m = load(FIX "hf_gpt2_cls_tiny", NULL, NULL, err, sizeof err);
    ut_st_file *f = ut_st_open(BATCH, err, sizeof err);
    CHECK(m && f, "%s", err);
    if (m && f) hfp_check_adamw(m, f, ".c_attn.bias");
    for (int l = 0; m && f && l < 2; l++) {
        char name[64];
        snprintf(name, sizeof name, "h.%d.attn.c_attn.bias", l);
        int p = 0;
        while (p < m->params.n && strcmp(m->params.names[p], name)) p++;
        CHECK(p < m->params.n, "%s", name);
        if (p == m->params.n) continue;
        const float *ours = m->params.flat + m->params.segs[p].offset;
        snprintf(name, sizeof name, "after.h.%d.attn.c_attn.bias", l);
        const ut_st_tensor *a = ut_st_get(f, name);
        CHECK(a && ut_st_numel(a) == 96, "%s", name);
        if (!a) continue;
        const float *ref = a->data;
        double e = fmax(pt_rel_err(ours, ref, 32), pt_rel_err(ours + 64, ref + 64, 32));
        CHECK(e < HFP_TOL, "%s (query, value): relative error %.3g", name, e);
    }
    ut_st_close(f);
    ut_model_free(m);
}

/* the padding mask matters only through rows that are not read; the score
 * row does: a pad token id read as real changes the logits of padded rows */
static void test_pad_token_id_decides_the_row(void) {
    char err[1024];
    ut_model *m = load(FIX "hf_gpt2_cls_tiny", "pad_token_id", "0", err, sizeof err);
    ut_st_file *f = ut_st_open(BATCH, err, sizeof err);
    CHECK(m && f, "%s", err);
    if (!m || !f) goto done;
    ut_ctx *ctx = ut_ctx_new(NULL);
    ut_ctx_set_training(ctx, false);
    ut_tensor *logits = ut_model_forward(m, ctx, pt_stored(ctx, ut_st_get(f, "input")));
    CHECK(logits, "%s", ut_ctx_error(ctx));
    if (logits) {
        /* row 0 has no padding: the same; row 1 is padded: it now reads the last (pad) position */
        CHECK(fabsf(ut_f32(logits)[0] - hfp_value(f, "logits", 0)) < 1e-5f, "row 0 changed");
        CHECK(fabsf(ut_f32(logits)[2] - hfp_value(f, "logits", 2)) > 1e-4f, "row 1 did not change");
    }
    ut_ctx_free(ctx);
done:
    ut_st_close(f);
    ut_model_free(m);
}

/* hf_gpt2_tiny (an LM, no pad_token_id): a new score head N(0, 0.02); a
 * batch of 3 rows is refused naming pad_token_id, one row is read at its end */
static void test_new_head_and_no_pad_token(void) {
    char err[1024];
    ut_model *m = load(FIX "hf_gpt2_tiny", "num_labels", "3", err, sizeof err);
    ut_st_file *f = ut_st_open(BATCH, err, sizeof err);
    CHECK(m && f, "%s", err);
    if (!m || !f) goto done;
    ut_tensor *w = ut_model_param(m, "score.weight");
    CHECK(w && w->ne[0] == 3 && w->ne[1] == 32 && m->params.n == 29, "score (3, 32)");
    double ss = 0;
    for (int64_t i = 0; w && i < ut_nelem(w); i++) ss += (double)ut_f32(w)[i] * ut_f32(w)[i];
    double sd = w ? sqrt(ss / (double)ut_nelem(w)) : 0;
    CHECK(sd > 0.014 && sd < 0.026, "score weight std %.4f, expected about 0.02", sd);
    ut_ctx *ctx = ut_ctx_new(NULL);
    ut_ctx_set_training(ctx, false);
    CHECK(!ut_model_forward(m, ctx, pt_stored(ctx, ut_st_get(f, "input"))), "a padded batch without pad_token_id ran");
    const char *e = ut_ctx_error(ctx);
    CHECK(e && strstr(e, "pad_token_id") && strstr(e, "model.pad_token_id"), "error: %s", e ? e : "(none)");
    ut_ctx_clear_error(ctx);
    int32_t one[3 * 4] = {5, 6, 7, 8, 0, 0, 0, 0, 1, 1, 1, 1};
    ut_tensor *x = ut_tensor_from(ctx, UT_I32, 3, (int64_t[]){1, 3, 4}, one);
    ut_tensor *l = ut_model_forward(m, ctx, x);
    CHECK(l && l->ne[0] == 1 && l->ne[1] == 3, "one row: %s", ut_ctx_error(ctx));
    ut_ctx_free(ctx);
done:
    ut_st_close(f);
    ut_model_free(m);
}

/* training mode with dropout (attention and residual): checkpointing
 * recomputes with the same masks, so the gradients are bit-identical */
static void test_checkpointing_with_dropout(void) {
    const char *const opts[] = {"task", "sequence_classification", "dropout", "0.1", NULL};
    hfp_check_checkpointing("gpt2", FIX "hf_gpt2_cls_tiny", opts, BATCH);
}

/* bf16 and fp16 autocast (the padding mask's -FLT_MAX rounds to -inf there,
 * under the causal -inf): finite logits and loss near transformers' fp32 */
static void test_autocast(void) {
    hfp_check_autocast("gpt2", FIX "hf_gpt2_cls_tiny", (const char *const[]){"task", "sequence_classification", NULL},
                       BATCH);
}

static void test_refusals(void) {
    char err[1024] = "";
    ut_kv *kv = ut_kv_new();
    ut_kv_set(kv, "pad_token_id", "3");
    ut_model *m = ut_model_create("gpt2", kv, 7, err, sizeof err);
    CHECK(!m && strstr(err, "model.pad_token_id") && strstr(err, "sequence_classification"), "%s", err);
    ut_model_free(m);
    ut_kv_set(kv, "task", "token_classification");
    m = ut_model_create("gpt2", kv, 7, err, sizeof err);
    CHECK(!m && strstr(err, "token_classification") && strstr(err, "sequence_classification"), "%s", err);
    ut_model_free(m);
    ut_kv_free(kv);
    /* an LM's (B, T) tokens are not a classifier's (B, 3, T) */
    m = load(FIX "hf_gpt2_cls_tiny", NULL, NULL, err, sizeof err);
    ut_ctx *ctx = ut_ctx_new(NULL);
    int32_t ids[4] = {1, 2, 3, 4};
    CHECK(m && !ut_model_forward(m, ctx, ut_tensor_from(ctx, UT_I32, 2, (int64_t[]){1, 4}, ids)), "ran");
    CHECK(strstr(ut_ctx_error(ctx), "(B, 3, T)"), "%s", ut_ctx_error(ctx));
    ut_ctx_free(ctx);
    ut_model_free(m);
}

int main(int argc, char **argv) {
    (void)argc;
    (void)argv;
    RUN(test_logits_loss_grads);
    RUN(test_adamw_trainer_groups);
    RUN(test_pad_token_id_decides_the_row);
    RUN(test_new_head_and_no_pad_token);
    RUN(test_checkpointing_with_dropout);
    RUN(test_autocast);
    RUN(test_refusals);
    return TEST_SUMMARY();
}
