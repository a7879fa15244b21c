/* Hugging Face masked language modeling parity: utrain's bert and roberta
 * with model.task masked_lm, reading the directories
 * tests/parity/make_hf_mlm_fixtures.py saved from transformers' own
 * BertForMaskedLM and RobertaForMaskedLM (the decoder tied to the word
 * embedding, saved once), give transformers' logits over the vocabulary at
 * every real position, its loss over the masked positions and every
 * gradient, both ways utrain computes them: every position's logits
 * (ut_model_forward) and the labeled rows alone with the decoder fused
 * into the loss (ut_model_forward_loss, the trainer's way); unpadded and
 * (RoBERTa, left-padded) padded; 10 AdamW steps over Hugging Face Trainer's groups; and the
 * refusals. */
#include <string.h>

#include "test.h"
#include "hf_parity.h"

#define FIX "tests/parity/fixtures/"
#define KEY_BIAS "attention.self.key.bias" /* gradient zero in exact arithmetic */

typedef struct {
    const char *model, *dir, *batch;
} fixture;

static const fixture fixtures[2] = {
    {"bert", FIX "hf_bert_mlm_tiny", FIX "hf_bert_mlm_tiny_batch.safetensors"},
    {"roberta", FIX "hf_roberta_mlm_tiny", FIX "hf_roberta_mlm_tiny_batch.safetensors"},
};

static ut_model *load(const fixture *fx, char *err, size_t n) {
    return hfp_load(fx->model, fx->dir, (const char *const[]){"task", "masked_lm", NULL}, err, n);
}

/* The fixture's input with every sequence moved right by one padding
 * position (a left-padded batch: the padded layout) and its labels with it */
static void shifted(const ut_st_file *f, int32_t *x, int32_t *y, int64_t *B, int64_t *T, int32_t pad) {
    const ut_st_tensor *in = ut_st_get(f, "input");
    const int32_t *rx = (const int32_t *)in->data, *ry = (const int32_t *)ut_st_get(f, "labels")->data;
    *B = in->shape[0];
    int64_t t0 = in->shape[2], t1 = t0 + 1;
    for (int64_t b = 0; b < *B; b++)
        for (int64_t t = 0; t < t1; t++) {
            bool first = t == 0;
            for (int k = 0; k < 3; k++)
                x[(b * 3 + k) * t1 + t] = first ? (k == 0 ? pad : 0) : rx[(b * 3 + k) * t0 + t - 1];
            y[b * t1 + t] = first ? -100 : ry[b * t0 + t - 1];
        }
    *T = t1;
}

/* Eval-mode forward, loss and backward: with rows, through
 * ut_model_forward_loss (the labeled rows alone, the decoder fused into the
 * loss), else every position's logits against transformers' at the real
 * tokens; then the loss and every gradient. shift: the left-padded batch. */
static int check_batch(ut_model *m, const ut_st_file *f, bool rows, bool shift, int32_t pad) {
    ut_ctx *ctx = ut_ctx_new(NULL);
    ut_ctx_set_training(ctx, false);
    ut_model_zero_grad(m);
    const ut_st_tensor *in = ut_st_get(f, "input"), *rl = ut_st_get(f, "logits");
    int64_t B = in->shape[0], T = in->shape[2], V = rl->shape[2], s = shift ? 1 : 0;
    int32_t x[3 * 3 * 64], y[3 * 64];
    ut_tensor *xt = pt_stored(ctx, in), *yt = pt_stored(ctx, ut_st_get(f, "labels"));
    if (shift) {
        shifted(f, x, y, &B, &T, pad);
        xt = ut_tensor_from(ctx, UT_I32, 3, (int64_t[]){B, 3, T}, x);
        yt = ut_tensor_from(ctx, UT_I32, 2, (int64_t[]){B, T}, y);
        T -= 1; /* the fixture's */
    }
    ut_tensor *logits = NULL, *loss;
    if (rows) {
        loss = ut_model_forward_loss(m, ctx, xt, yt, &logits);
        CHECK(loss && !logits, "the fused loss makes no logits: %s", ut_ctx_error(ctx));
    } else {
        logits = ut_model_forward(m, ctx, xt);
        loss = ut_model_loss(m, ctx, logits, yt);
    }
    CHECK(loss && ut_backward(ctx, loss) == 0, "%s", ut_ctx_error(ctx));
    int checked = 0;
    if (loss) {
        if (logits) {
            CHECK(logits->ndim == 3 && logits->ne[0] == B && logits->ne[1] == T + s && logits->ne[2] == V,
                  "logits shape");
            const int32_t *mask = (const int32_t *)in->data;
            const float *ref = rl->data, *got = ut_f32(logits);
            double worst = 0, big = 0;
            for (int64_t b = 0; b < B; b++)
                for (int64_t t = 0; t < T; t++)
                    for (int64_t v = 0; mask[(b * 3 + 2) * T + t] && v < V; v++) {
                        double r = ref[(b * T + t) * V + v],
                               d = fabs(got[(b * (T + s) + t + s) * V + v] - r);
                        worst = d > worst ? d : worst, big = fabs(r) > big ? fabs(r) : big;
                    }
            CHECK(worst < HFP_TOL * big, "logits of the real tokens: error %.3g of %.3g", worst, big);
        }
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
            const char *bias = i ? "lm_head.bias" : "cls.predictions.bias";
            CHECK(ut_model_param(m, bias) && !ut_model_param(m, "bert.pooler.dense.weight") &&
                      !ut_model_param(m, "classifier.weight"), "%s: the MLM head, no pooler", fixtures[i].model);
            /* shifted: RoBERTa only (its positions count the real tokens; BERT's would move) */
            for (int rows = 0; rows < 2; rows++)
                for (int shift = 0; shift < 1 + i; shift++) {
                    int got = check_batch(m, f, rows, shift, i ? 1 : 0);
                    CHECK(got == 42, "%s rows %d shift %d: %d gradients checked", fixtures[i].model, rows, shift,
                          got);
                }
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

/* the labeled rows' logits (the trainer's evaluation: prepare given the
 * targets) are the full logits' rows at those positions; a batch without a
 * labeled position has a loss of 0 */
static void test_rows_logits(void) {
    char err[1024];
    ut_model *m = load(&fixtures[0], err, sizeof err);
    ut_st_file *f = ut_st_open(fixtures[0].batch, err, sizeof err);
    CHECK(m && f, "%s", err);
    if (m && f) {
        ut_ctx *ctx = ut_ctx_new(NULL);
        ut_ctx_set_training(ctx, false);
        const ut_st_tensor *in = ut_st_get(f, "input"), *lab = ut_st_get(f, "labels");
        ut_tensor *full = ut_model_forward(m, ctx, pt_stored(ctx, in));
        /* prepare as the loader does it, with the targets beside x */
        ut_inputs inputs = {.dev = UT_CPU};
        ut_host_array x = {.dtype = UT_I32, .ndim = 3, .ne = {in->shape[0], 3, in->shape[2]}, .host = (void *)in->data};
        inputs.targets = (ut_host_array){.dtype = UT_I32, .ndim = 2, .ne = {in->shape[0], in->shape[2]},
                                         .host = (void *)lab->data};
        CHECK(m->prepare(m, &x, &inputs, err, sizeof err) == 0, "%s", err);
        inputs.targets = (ut_host_array){0};
        ut_tensor *rows = ut_model_forward_inputs(m, ctx, &inputs);
        int64_t B = in->shape[0], T = in->shape[2], V = full ? full->ne[2] : 0, M = 0;
        const int32_t *y = (const int32_t *)lab->data;
        for (int64_t i = 0; i < B * T; i++) M += y[i] != -100;
        CHECK(rows && rows->ndim == 2 && rows->ne[0] == M && rows->ne[1] == V, "rows (%lld, V)", (long long)M);
        ut_tensor *loss = rows ? ut_model_loss(m, ctx, rows, pt_stored(ctx, lab)) : NULL;
        float rloss = ((const float *)ut_st_get(f, "loss")->data)[0];
        CHECK(loss && fabsf(ut_f32(loss)[0] - rloss) < 1e-4f * rloss, "loss of the rows");
        double worst = 0;
        for (int64_t i = 0, r = 0; rows && full && i < B * T; i++)
            if (y[i] != -100) {
                for (int64_t v = 0; v < V; v++) {
                    double d = fabs(ut_f32(rows)[r * V + v] - ut_f32(full)[i * V + v]);
                    worst = d > worst ? d : worst;
                }
                r++;
            }
        CHECK(worst < 1e-4, "rows against the full logits: %.3g", worst);
        /* nothing labeled: one ignored row, loss 0 */
        int32_t none[64 * 3];
        for (int i = 0; i < B * T; i++) none[i] = -100;
        ut_tensor *nl = ut_model_forward_loss(m, ctx, pt_stored(ctx, in),
                                              ut_tensor_from(ctx, UT_I32, 2, (int64_t[]){B, T}, none), NULL);
        CHECK(nl && ut_f32(nl)[0] == 0.0f, "no label: loss %g (%s)", nl ? ut_f32(nl)[0] : -1, ut_ctx_error(ctx));
        ut_inputs_free(&inputs);
        ut_ctx_free(ctx);
    }
    ut_st_close(f);
    ut_model_free(m);
}

static void test_refusals(void) {
    char err[1024] = "";
    ut_model *m = hfp_load("bert", FIX "hf_bert_mlm_tiny",
                           (const char *const[]){"task", "masked_lm", "num_labels", "3", NULL}, err, sizeof err);
    CHECK(!m && strstr(err, "model.task masked_lm predicts tokens of the vocabulary") &&
              strstr(err, "remove model.num_labels"), "%s", err);
    ut_model_free(m);
    m = hfp_load("bert", FIX "hf_bert_mlm_tiny", (const char *const[]){"task", "causal_lm", NULL}, err, sizeof err);
    CHECK(!m && strstr(err, "use sequence_classification, token_classification or masked_lm"), "%s", err);
    ut_model_free(m);
    /* targets of another shape than the batch's */
    m = hfp_load("bert", FIX "hf_bert_mlm_tiny", (const char *const[]){"task", "masked_lm", NULL}, err, sizeof err);
    CHECK(m, "%s", err);
    if (m) {
        ut_ctx *ctx = ut_ctx_new(NULL);
        int32_t x[3 * 4] = {2, 10, 11, 3, 0, 0, 0, 0, 1, 1, 1, 1}, y[1] = {1};
        ut_tensor *loss = ut_model_forward_loss(m, ctx, ut_tensor_from(ctx, UT_I32, 3, (int64_t[]){1, 3, 4}, x),
                                                ut_tensor_from(ctx, UT_I32, 1, (int64_t[]){1}, y), NULL);
        CHECK(!loss && strstr(ut_ctx_error(ctx), "must match the batch's (1, 4)"), "%s", ut_ctx_error(ctx));
        ut_ctx_free(ctx);
    }
    ut_model_free(m);
    /* a sequence classifier's save and a bare encoder give the head fresh, as transformers does */
    const char *from[2] = {FIX "hf_bert_tiny", FIX "hf_roberta_tiny"};
    for (int i = 0; i < 2; i++) {
        m = hfp_load(i ? "roberta" : "bert", from[i], (const char *const[]){"task", "masked_lm", NULL}, err,
                     sizeof err);
        CHECK(m && m->params.n == 42, "%s: %s (%d parameters)", from[i], err, m ? m->params.n : 0);
        ut_model_free(m);
    }
}

int main(void) {
    RUN(test_logits_loss_grads);
    RUN(test_adamw_trainer_groups);
    RUN(test_rows_logits);
    RUN(test_refusals);
    return TEST_SUMMARY();
}
