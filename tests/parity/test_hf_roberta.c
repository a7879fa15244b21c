/* Hugging Face RoBERTa parity: utrain's bert reading a RoBERTa directory
 * (tests/parity/fixtures/hf_roberta_tiny, made by
 * tests/parity/make_hf_cls_fixtures.py with transformers' own
 * RobertaForSequenceClassification; its config.json's model_type picks the
 * variant) gives transformers' logits, loss and every gradient on a batch with
 * padding and a sentence pair (positions from pad_token_id + 1, skipping
 * padding; no pooler; the dense + tanh + out_proj head on <s>), and 10 AdamW
 * steps over Hugging Face Trainer's groups. model.name roberta reads the same
 * directory and refuses a BERT one; a bare encoder gets a new head. */
#include <string.h>

#include "test.h"
#include "hf_parity.h"
#include "proc.h"

#define FIX "tests/parity/fixtures/"
#define BATCH FIX "hf_roberta_tiny_batch.safetensors"
#define KEY_BIAS "attention.self.key.bias" /* gradient zero in exact arithmetic */

static ut_model *load(const char *name, const char *dir, const char *key, const char *val, char *err, size_t n) {
    return hfp_load(name, dir, (const char *const[]){key, val, NULL}, err, n);
}

static void test_logits_loss_grads(void) {
    const char *names[2] = {"bert", "roberta"};
    for (int i = 0; i < 2; i++) {
        char err[1024];
        ut_model *m = load(names[i], FIX "hf_roberta_tiny", NULL, NULL, err, sizeof err);
        ut_st_file *f = ut_st_open(BATCH, err, sizeof err);
        CHECK(m && f, "%s", err);
        if (m && f) {
            CHECK(ut_model_param(m, "roberta.embeddings.position_embeddings.weight") &&
                      ut_model_param(m, "classifier.out_proj.weight") && !ut_model_param(m, "bert.pooler.dense.weight"),
                  "RoBERTa's names");
            CHECK(hfp_check_batch(m, f, KEY_BIAS) == 41, "gradients checked");
        }
        ut_st_close(f);
        ut_model_free(m);
    }
}

static void test_adamw_trainer_groups(void) {
    char err[1024];
    ut_model *m = load("bert", FIX "hf_roberta_tiny", NULL, NULL, err, sizeof err);
    ut_st_file *f = ut_st_open(BATCH, err, sizeof err);
    CHECK(m && f, "%s", err);
    if (m && f) hfp_check_adamw(m, f, KEY_BIAS);
    ut_st_close(f);
    ut_model_free(m);
}

/* padding at the end leaves a row's logits as they are (the padding mask;
 * the offset positions themselves are checked by the parity above: positions
 * from 0 would change every logit), and a row longer than the learned
 * positions allow is refused */
static void test_padding_and_length(void) {
    char err[1024];
    ut_model *a = load("bert", FIX "hf_roberta_tiny", NULL, NULL, err, sizeof err);
    CHECK(a, "%s", err);
    if (!a) return;
    ut_ctx *ctx = ut_ctx_new(NULL);
    ut_ctx_set_training(ctx, false);
    /* <s> 21 22 </s> alone (T = 4), and with 3 pads (T = 7) */
    int32_t x4[12] = {0, 21, 22, 2, 0, 0, 0, 0, 1, 1, 1, 1};
    int32_t x7[21] = {0, 21, 22, 2, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 0, 0, 0};
    ut_tensor *l4 = ut_model_forward(a, ctx, ut_tensor_from(ctx, UT_I32, 3, (int64_t[]){1, 3, 4}, x4));
    ut_tensor *l7 = ut_model_forward(a, ctx, ut_tensor_from(ctx, UT_I32, 3, (int64_t[]){1, 3, 7}, x7));
    CHECK(l4 && l7, "%s", ut_ctx_error(ctx));
    if (l4 && l7) {
        CHECK(fabsf(ut_f32(l4)[0] - ut_f32(l7)[0]) < 1e-5f && fabsf(ut_f32(l4)[1] - ut_f32(l7)[1]) < 1e-5f,
              "padding changed the logits: %g %g vs %g %g", ut_f32(l4)[0], ut_f32(l4)[1], ut_f32(l7)[0],
              ut_f32(l7)[1]);
    }
    /* too long for the learned positions: 66 - pad_token_id - 1 = 64 tokens at most */
    ut_tensor *big = ut_tensor_zeros(ctx, UT_I32, 3, (int64_t[]){1, 3, 65});
    CHECK(!ut_model_forward(a, ctx, big), "65 tokens accepted");
    CHECK(strstr(ut_ctx_error(ctx), "T <= 64"), "%s", ut_ctx_error(ctx));
    ut_ctx_free(ctx);
    ut_model_free(a);
}

static void test_refusals(void) {
    char err[1024] = "";
    ut_model *m = load("roberta", FIX "hf_bert_tiny", NULL, NULL, err, sizeof err);
    CHECK(!m && strstr(err, "model_type 'bert'") && strstr(err, "model roberta"), "%s", err);
    ut_model_free(m);
    m = load("bert", FIX "hf_roberta_tiny", "pad_token_id", "0", err, sizeof err);
    CHECK(!m && strstr(err, "model.pad_token_id: set by model.pretrained"), "%s", err);
    ut_model_free(m);
    m = load("bert", NULL, "pad_token_id", "1", err, sizeof err);
    CHECK(!m && strstr(err, "RoBERTa only"), "%s", err);
    ut_model_free(m);
    /* from scratch: RoBERTa-base's shapes (type vocabulary of one, 514 positions) */
    m = load("roberta", NULL, "num_hidden_layers", "1", err, sizeof err);
    ut_tensor *tt = m ? ut_model_param(m, "roberta.embeddings.token_type_embeddings.weight") : NULL;
    ut_tensor *pe = m ? ut_model_param(m, "roberta.embeddings.position_embeddings.weight") : NULL;
    CHECK(tt && tt->ne[0] == 1 && pe && pe->ne[0] == 514, "%s", err);
    /* as transformers' init: the padding rows (pad_token_id 1) of the word and position tables are 0 */
    ut_tensor *we = m ? ut_model_param(m, "roberta.embeddings.word_embeddings.weight") : NULL;
    for (int i = 0; we && pe && i < 2; i++) {
        const float *w = ut_f32(i ? pe : we);
        double zero = 0, other = 0;
        for (int c = 0; c < 768; c++) zero += fabs(w[768 + c]), other += fabs(w[2 * 768 + c]);
        CHECK(zero == 0 && other > 1, "%s: row 1 |sum| %g, row 2 %g", i ? "positions" : "words", zero, other);
    }
    ut_model_free(m);
}

/* a bare encoder (RobertaModel's names, no "roberta.", a pooler that the
 * classifier does not use): loads with a new head N(0, 0.02), zero biases */
static void test_bare_encoder_new_head(void) {
    char d[256], path[600], err[1024];
    UT_ASSERT(tp_make_tmpdir(d, sizeof d, "hfrob"));
    ut_st_file *f = ut_st_open(FIX "hf_roberta_tiny/model.safetensors", err, sizeof err);
    CHECK(f, "%s", err);
    if (!f) return;
    const char *names[64];
    ut_st_tensor ts[64];
    int k = 0;
    for (int i = 0; i < ut_st_count(f) && k < 64; i++) {
        const char *nm = ut_st_name(f, i);
        if (!strncmp(nm, "roberta.", 8)) names[k] = nm + 8, ts[k++] = *ut_st_get(f, nm);
    }
    snprintf(path, sizeof path, "%s/model.safetensors", d);
    CHECK(ut_st_save(path, k, names, ts, NULL, err, sizeof err) == 0, "%s", err);
    char *cfg = tp_slurp(FIX "hf_roberta_tiny/config.json");
    snprintf(path, sizeof path, "%s/config.json", d);
    FILE *o = fopen(path, "w");
    fputs(cfg, o);
    fclose(o);
    free(cfg);
    ut_st_close(f);
    ut_model *full = load("bert", FIX "hf_roberta_tiny", NULL, NULL, err, sizeof err);
    ut_model *bare = load("bert", d, NULL, NULL, err, sizeof err);
    CHECK(full && bare, "%s", err);
    if (full && bare) {
        ut_tensor *a = ut_model_param(full, "roberta.encoder.layer.1.output.dense.weight"),
                  *b = ut_model_param(bare, "roberta.encoder.layer.1.output.dense.weight");
        CHECK(!memcmp(ut_f32(a), ut_f32(b), (size_t)ut_nelem(a) * sizeof(float)), "encoder differs");
        ut_tensor *w = ut_model_param(bare, "classifier.out_proj.weight"), *bb = ut_model_param(bare, "classifier.dense.bias");
        double ss = 0;
        for (int64_t i = 0; i < ut_nelem(w); i++) ss += (double)ut_f32(w)[i] * ut_f32(w)[i];
        double sd = sqrt(ss / (double)ut_nelem(w));
        CHECK(sd > 0.01 && sd < 0.03, "out_proj std %.4f", sd);
        CHECK(ut_f32(bb)[0] == 0.0f && ut_f32(bb)[31] == 0.0f, "dense bias zero");
    }
    ut_model_free(full);
    ut_model_free(bare);
    tp_finish(0, d);
}

int main(int argc, char **argv) {
    (void)argc;
    tp_set_program(argv[0]);
    RUN(test_logits_loss_grads);
    RUN(test_adamw_trainer_groups);
    RUN(test_padding_and_length);
    RUN(test_refusals);
    RUN(test_bare_encoder_new_head);
    return TEST_SUMMARY();
}
