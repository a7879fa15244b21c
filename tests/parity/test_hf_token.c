/* Hugging Face token classification parity: utrain's bert and roberta with
 * model.task token_classification, reading the directories
 * tests/parity/make_hf_token_fixtures.py saved from transformers' own
 * BertForTokenClassification and RobertaForTokenClassification, give
 * transformers' logits (B, T, K), loss (-100 ignored) and every gradient on
 * a batch with padding and words of several pieces, unpadded and padded,
 * and 10 AdamW steps over Hugging Face Trainer's groups; and the tagged_text
 * reader (ut_tagged_dataset_open) turns the fixture's words and tags into
 * exactly the input planes and labels run_ner's tokenize_and_align_labels
 * makes with the fast tokenizer (label_all_tokens too). */
#include <string.h>

#include "test.h"
#include "hf_parity.h"

#define FIX "tests/parity/fixtures/"
#define KEY_BIAS "attention.self.key.bias" /* gradient zero in exact arithmetic */

static const char *const tags[5] = {"O", "B-PER", "I-PER", "B-LOC", "I-LOC"}; /* the checkpoints' id2label */

typedef struct {
    const char *model, *dir, *batch, *param;
} fixture;

static const fixture fixtures[2] = {
    {"bert", FIX "hf_bert_tok_tiny", FIX "hf_bert_tok_tiny_batch.safetensors", "bert.encoder.layer.0.output.dense.weight"},
    {"roberta", FIX "hf_roberta_tok_tiny", FIX "hf_roberta_tok_tiny_batch.safetensors",
     "roberta.encoder.layer.0.output.dense.weight"},
};

static ut_model *load(const fixture *fx, char *err, size_t n) {
    return hfp_load(fx->model, fx->dir, (const char *const[]){"task", "token_classification", NULL}, err, n);
}

/* Eval-mode forward, loss and backward on the fixture batch: the logits
 * of the real tokens (padding's are not compared: transformers computes
 * them, utrain computes only the real tokens and leaves padding a copy of
 * a real row; the loss never reads them), the loss and every gradient */
static int check_batch(ut_model *m, const ut_st_file *f) {
    ut_ctx *ctx = ut_ctx_new(NULL);
    ut_ctx_set_training(ctx, false);
    ut_model_zero_grad(m);
    const ut_st_tensor *in = ut_st_get(f, "input"), *rl = ut_st_get(f, "logits");
    ut_tensor *logits = ut_model_forward(m, ctx, pt_stored(ctx, in));
    ut_tensor *loss = ut_model_loss(m, ctx, logits, pt_stored(ctx, ut_st_get(f, "labels")));
    CHECK(loss && ut_backward(ctx, loss) == 0, "%s", ut_ctx_error(ctx));
    int checked = 0;
    if (loss) {
        int64_t B = in->shape[0], T = in->shape[2], K = rl->shape[2];
        CHECK(logits->ndim == 3 && logits->ne[0] == B && logits->ne[1] == T && logits->ne[2] == K, "logits shape");
        const int32_t *mask = (const int32_t *)in->data;
        const float *ref = rl->data, *got = ut_f32(logits);
        double worst = 0, big = 0;
        for (int64_t b = 0; b < B; b++)
            for (int64_t t = 0; t < T; t++)
                for (int64_t k = 0; mask[(b * 3 + 2) * T + t] && k < K; k++) {
                    double r = ref[(b * T + t) * K + k], d = fabs(got[(b * T + t) * K + k] - r);
                    worst = d > worst ? d : worst, big = fabs(r) > big ? fabs(r) : big;
                }
        CHECK(worst < HFP_TOL * big, "logits of the real tokens: error %.3g of %.3g", worst, big);
        float rloss = ((const float *)ut_st_get(f, "loss")->data)[0];
        CHECK_NEAR(ut_f32(loss)[0], rloss, 1e-4 * rloss);
        for (int p = 0; p < m->params.n; p++, checked++) hfp_check_grad(m, p, f, KEY_BIAS);
    }
    ut_ctx_free(ctx);
    return checked;
}

static void test_logits_loss_grads(void) {
    for (int i = 0; i < 2; i++) {
        char err[1024];
        ut_model *m = load(&fixtures[i], err, sizeof err);
        ut_st_file *f = ut_st_open(fixtures[i].batch, err, sizeof err);
        CHECK(m && f, "%s: %s", fixtures[i].model, err);
        if (m && f) {
            CHECK(ut_model_param(m, "classifier.weight") && !ut_model_param(m, "bert.pooler.dense.weight") &&
                      !ut_model_param(m, "classifier.dense.weight"), "%s: one linear head, no pooler", fixtures[i].model);
            int got = check_batch(m, f);
            CHECK(got == 39, "%s: %d gradients checked", fixtures[i].model, got);
        }
        ut_st_close(f);
        ut_model_free(m);
    }
}

static void test_adamw_trainer_groups(void) {
    for (int i = 0; i < 2; i++) {
        char err[1024];
        ut_model *m = load(&fixtures[i], err, sizeof err);
        ut_st_file *f = ut_st_open(fixtures[i].batch, err, sizeof err);
        CHECK(m && f, "%s", err);
        if (m && f) hfp_check_adamw(m, f, KEY_BIAS);
        ut_st_close(f);
        ut_model_free(m);
    }
}

/* ner_sample.jsonl through the reader: planes (3, T) and labels (T) of the
 * fixture batch, padded to max_len 64 past T */
static void test_reader_as_run_ner(void) {
    for (int i = 0; i < 2; i++) {
        for (int all = 0; all < 2; all++) {
            char err[1024];
            ut_tokenizer *tok = ut_tokenizer_load(fixtures[i].dir, err, sizeof err);
            ut_st_file *f = ut_st_open(fixtures[i].batch, err, sizeof err);
            CHECK(tok && f, "%s", err);
            if (!tok || !f) {
                ut_tokenizer_free(tok);
                ut_st_close(f);
                continue;
            }
            ut_tagged_opts o = {.max_len = 64, .names = tags, .nnames = 5, .label_all_tokens = all};
            ut_dataset *ds = ut_tagged_dataset_open(FIX "ner_sample.jsonl", tok, &o, err, sizeof err);
            CHECK(ds && ds->n == 4 && ds->num_classes == 5 && ut_tok_labels(ds), "%s", err);
            const ut_st_tensor *in = ut_st_get(f, "input"), *lab = ut_st_get(f, all ? "label_all" : "labels");
            int64_t T = in->shape[2];
            for (int64_t e = 0; ds && e < ds->n; e++) {
                int32_t x[3 * 64], y[64];
                UT_ASSERT(ds->get(ds, e, x, y, err, sizeof err) == 0);
                const int32_t *rx = (const int32_t *)in->data + e * 3 * T, *ry = (const int32_t *)lab->data + e * T;
                int bad = 0;
                for (int64_t t = 0; t < 64; t++) {
                    bool pad = t >= T;
                    bad += x[t] != (pad ? (i ? 1 : 0) : rx[t]) || x[64 + t] != 0 ||
                           x[128 + t] != (pad ? 0 : rx[2 * T + t]) || y[t] != (pad ? -100 : ry[t]);
                }
                CHECK(!bad, "%s%s: sentence %lld differs from run_ner's at %d positions", fixtures[i].model,
                      all ? " label_all_tokens" : "", (long long)e, bad);
            }
            ut_dataset_free(ds);
            ut_tokenizer_free(tok);
            ut_st_close(f);
        }
    }
}

/* a token classifier refuses a regression's or multi-label's problem type
 * and one tag; a sequence classifier's save loads as a token classifier
 * with a new head (its pooler and RoBERTa's two-layer head left out) */
static void test_refusals_and_heads(void) {
    char err[1024] = "";
    ut_model *m = hfp_load("bert", FIX "hf_bert_tok_tiny",
                           (const char *const[]){"task", "token_classification", "problem_type", "regression", NULL}, err,
                           sizeof err);
    CHECK(!m && strstr(err, "model.task token_classification: a class per token") &&
              strstr(err, "remove model.problem_type"), "%s", err);
    ut_model_free(m);
    m = hfp_load("bert", FIX "hf_bert_tok_tiny",
                 (const char *const[]){"task", "token_classification", "num_labels", "1", NULL}, err, sizeof err);
    CHECK(!m && strstr(err, "num_labels must be 2 or more"), "%s", err);
    ut_model_free(m);
    /* targets that are not a class per token: a context error saying so */
    m = hfp_load("bert", FIX "hf_bert_tok_tiny", (const char *const[]){"task", "token_classification", NULL}, err,
                 sizeof err);
    CHECK(m, "%s", err);
    if (m) {
        ut_ctx *ctx = ut_ctx_new(NULL);
        int32_t x[3 * 4] = {2, 10, 11, 3, 0, 0, 0, 0, 1, 1, 1, 1}, y[1] = {1};
        ut_tensor *logits = ut_model_forward(m, ctx, ut_tensor_from(ctx, UT_I32, 3, (int64_t[]){1, 3, 4}, x));
        CHECK(logits && logits->ndim == 3 && logits->ne[1] == 4 && logits->ne[2] == 5, "%s", ut_ctx_error(ctx));
        ut_tensor *loss = ut_model_loss(m, ctx, logits, ut_tensor_from(ctx, UT_I32, 1, (int64_t[]){1}, y));
        CHECK(!loss && strstr(ut_ctx_error(ctx), "I32 targets (B, T), a class per token, must match the logits"),
              "%s", ut_ctx_error(ctx));
        ut_ctx_free(ctx);
    }
    ut_model_free(m);
    m = hfp_load("bert", FIX "hf_bert_tok_tiny", (const char *const[]){"task", "causal_lm", NULL}, err, sizeof err);
    CHECK(!m && strstr(err, "use sequence_classification, token_classification or masked_lm"), "%s", err);
    ut_model_free(m);
    const char *from[2] = {FIX "hf_bert_tiny", FIX "hf_roberta_tiny"};
    for (int i = 0; i < 2; i++) {
        m = hfp_load("bert", from[i],
                     (const char *const[]){"task", "token_classification", "num_labels", "5", "ignore_mismatched_sizes",
                                           "true", NULL}, err, sizeof err);
        ut_tensor *w = m ? ut_model_param(m, "classifier.weight") : NULL;
        CHECK(w && w->ne[0] == 5 && w->ne[1] == 32, "%s: %s", from[i], err);
        CHECK(m && m->params.n == 39, "%s: %d parameters", from[i], m ? m->params.n : 0);
        ut_model_free(m);
    }
}

int main(void) {
    RUN(test_logits_loss_grads);
    RUN(test_adamw_trainer_groups);
    RUN(test_reader_as_run_ner);
    RUN(test_refusals_and_heads);
    return TEST_SUMMARY();
}
