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
#include "hf_parity.h"
#include "utrain/utrain.h"

#define FIX "tests/parity/fixtures/"
static ut_model *load(const char *dir, const char *num_labels, char *err, size_t n) {
    return hfp_load("bert", dir, (const char *const[]){"num_labels", num_labels, NULL}, err, n);
}

static void test_logits_loss_grads(void) {
    char err[1024];
    ut_model *m = load(FIX "hf_bert_tiny", NULL, err, sizeof err);
    CHECK(m, "%s", err);
    ut_st_file *f = ut_st_open(FIX "hf_bert_tiny_batch.safetensors", err, sizeof err);
    CHECK(f, "%s", err);
    if (m && f) {
        int checked = hfp_check_batch(m, f, "attention.self.key.bias");
        CHECK(checked == 41 && checked == m->params.n, "%d gradients checked of %d", checked, m->params.n);
    }
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
    if (m && f) hfp_check_adamw(m, f, "attention.self.key.bias");
    ut_st_close(f);
    ut_model_free(m);
}

/* training mode (hidden and attention dropout drawn): activation
 * checkpointing recomputes each layer with the same masks, so the gradients
 * are bit-identical to the plain run's, and dropout changes the loss */
static void test_checkpointing_with_dropout(void) {
    hfp_check_checkpointing("bert", FIX "hf_bert_tiny", NULL, FIX "hf_bert_tiny_batch.safetensors");
}

/* bf16 and fp16 autocast (the padding mask's -FLT_MAX rounds to -inf there):
 * finite logits and loss close to transformers' float32 ones */
static void test_autocast(void) {
    hfp_check_autocast("bert", FIX "hf_bert_tiny", NULL, FIX "hf_bert_tiny_batch.safetensors");
}

/* Unpadded execution, and the padded path it keeps for batches where a
 * sequence starts with padding (hfp_check_padded_path) */
static void test_left_padding_takes_the_padded_path(void) {
    char err[1024];
    ut_model *m = load(FIX "hf_bert_tiny", NULL, err, sizeof err);
    ut_st_file *f = ut_st_open(FIX "hf_bert_tiny_batch.safetensors", err, sizeof err);
    CHECK(m && f, "%s", err);
    if (m && f) hfp_check_padded_path(m, f);
    ut_st_close(f);
    ut_model_free(m);
}

/* transformers builds BERT's word embedding with padding_idx = pad_token_id
 * (0 here): that row takes no gradient, also where a text holds the pad
 * token itself (the unpadded path) and where a batch is left-padded (the
 * padded path); before, a literal [PAD] moved the row by about the learning
 * rate each step. */
static void test_padding_row_takes_no_gradient(void) {
    char err[1024];
    ut_model *m = load(FIX "hf_bert_tiny", NULL, err, sizeof err);
    ut_st_file *f = ut_st_open(FIX "hf_bert_tiny_batch.safetensors", err, sizeof err);
    CHECK(m && f, "%s", err);
    if (!m || !f) return ut_model_free(m), ut_st_close(f);
    const ut_st_tensor *in = ut_st_get(f, "input"), *lb = ut_st_get(f, "labels");
    int64_t B = in->shape[0], T = in->shape[2], C = 0;
    ut_tensor *w = ut_model_param(m, "bert.embeddings.word_embeddings.weight");
    C = w->ne[1];
    int32_t *x = malloc((size_t)(B * 3 * T) * sizeof *x);
    float *g = malloc((size_t)ut_nelem(w) * sizeof *g);
    for (int variant = 0; variant < 2; variant++) {
        memcpy(x, in->data, (size_t)(B * 3 * T) * sizeof *x);
        if (variant == 0) {
            x[2] = 0; /* row 0's third token is the pad token, inside the text (mask 1) */
        } else {      /* row 0 left-padded: its tokens shifted right by one, a pad id in front (mask 0) */
            memmove(x + 1, x, (size_t)(T - 1) * sizeof *x);
            memmove(x + T + 1, x + T, (size_t)(T - 1) * sizeof *x);
            memmove(x + 2 * T + 1, x + 2 * T, (size_t)(T - 1) * sizeof *x);
            x[0] = 0, x[T] = 0, x[2 * T] = 0;
        }
        ut_ctx *ctx = ut_ctx_new(NULL);
        ut_ctx_set_training(ctx, false);
        ut_tensor *y = ut_tensor_from(ctx, UT_I32, 1, (int64_t[]){B}, lb->data);
        ut_tensor *loss = ut_model_loss(m, ctx, ut_model_forward(m, ctx, ut_tensor_from(ctx, UT_I32, 3,
                                                                                       (int64_t[]){B, 3, T}, x)), y);
        CHECK(loss && ut_backward(ctx, loss) == 0, "%s", ut_ctx_error(ctx));
        CHECK(ut_tensor_get_grad(w, g, (size_t)ut_nelem(w) * sizeof *g) == 0, "word embedding gradient");
        double pad_row = 0, others = 0;
        for (int64_t c = 0; c < C; c++) pad_row += fabs(g[c]);
        for (int64_t i = C; i < ut_nelem(w); i++) others += fabs(g[i]);
        CHECK(pad_row == 0 && others > 0, "%s: |grad| of the pad row %g, of the others %g",
              variant ? "left-padded" : "literal pad token", pad_row, others);
        ut_model_zero_grad(m);
        ut_ctx_free(ctx);
    }
    free(x);
    free(g);
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
static void write_text(const char *path, const char *text) {
    FILE *f = fopen(path, "w");
    UT_ASSERT(f);
    fputs(text, f);
    fclose(f);
}

/* a copy of hf_bert_tiny's config.json with one replacement */
static void config_with(const char *dir, const char *from, const char *to) {
    hfp_config_with(FIX "hf_bert_tiny/config.json", dir, from, to);
}

static void test_bad_directories(void) {
    char d[256], p[600];
    UT_ASSERT(tp_make_tmpdir(d, sizeof d, "hfbad"));
    hfp_refused("bert", "/nonexistent/model", (const char *[]){"/nonexistent/model", "not a directory", NULL});
    hfp_refused("bert", d, (const char *[]){d, "no config.json", NULL});
    config_with(d, "\"model_type\": \"bert\"", "\"model_type\": \"t5\"");
    hfp_refused("bert", d, (const char *[]){"config.json", "model_type 't5'", NULL});
    config_with(d, "\"hidden_act\": \"gelu\"", "\"hidden_act\": \"swish\"");
    hfp_refused("bert", d, (const char *[]){"hidden_act 'swish'", NULL});
    config_with(d, "x", "x");
    hfp_refused("bert", d, (const char *[]){"no model.safetensors", NULL});
    snprintf(p, sizeof p, "%s/pytorch_model.bin", d);
    write_text(p, "pickle");
    hfp_refused("bert", d, (const char *[]){"pytorch_model.bin", "safetensors", NULL});
    /* a checkpoint for another size: the first tensor's shape is named */
    config_with(d, "\"hidden_size\": 32", "\"hidden_size\": 16");
    snprintf(p, sizeof p, "%s/model.safetensors", d);
    hfp_copy_file(FIX "hf_bert_tiny/model.safetensors", p, -1);
    hfp_refused("bert", d,
                (const char *[]){"model.safetensors",
                                 "tensor 'bert.embeddings.word_embeddings.weight' has shape (100, 32), the model "
                                 "needs (100, 16)",
                                 NULL});
    /* one more layer than the file has: the missing tensor is named */
    config_with(d, "\"num_hidden_layers\": 2", "\"num_hidden_layers\": 3");
    hfp_refused("bert", d, (const char *[]){"'bert.encoder.layer.2.attention.self.query.weight' is missing", NULL});
    /* cut short */
    hfp_check_cut_short("bert", d, FIX "hf_bert_tiny");
    tp_finish(0, d);
}

int main(int argc, char **argv) {
    (void)argc;
    tp_set_program(argv[0]);
    RUN(test_logits_loss_grads);
    RUN(test_adamw_trainer_groups);
    RUN(test_checkpointing_with_dropout);
    RUN(test_autocast);
    RUN(test_left_padding_takes_the_padded_path);
    RUN(test_padding_row_takes_no_gradient);
    RUN(test_bare_encoder_new_head);
    RUN(test_bad_directories);
    return TEST_SUMMARY();
}
