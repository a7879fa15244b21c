/* Hugging Face BART parity: utrain's bart loaded from a model directory as
 * save_pretrained writes it (tests/parity/fixtures/hf_bart_tiny, made by
 * tests/parity/make_hf_bart_fixtures.py with transformers' own
 * BartForSequenceClassification) gives transformers' logits, loss and every
 * parameter gradient on a batch with padding, and 10 AdamW steps over
 * Hugging Face Trainer's weight-decay groups. Also: the bare BartModel
 * layouts (with and without "model.", older files' embed_tokens copies, a
 * generation model's LM head) load with a new classification head, rows
 * with different </s> counts are refused naming the row, and bad
 * directories are refused naming the file, key or tensor. */
#include <string.h>
#include <sys/stat.h>

#include "proc.h"
#include "test.h"
#include "hf_parity.h"

#define FIX "tests/parity/fixtures/"
#define BATCH FIX "hf_bart_tiny_batch.safetensors"

static ut_model *load(const char *dir, const char *num_labels, char *err, size_t n) {
    return hfp_load("bart", dir, (const char *const[]){"num_labels", num_labels, NULL}, err, n);
}

static void test_logits_loss_grads(void) {
    char err[1024];
    ut_model *m = load(FIX "hf_bart_tiny", NULL, err, sizeof err);
    CHECK(m, "%s", err);
    ut_st_file *f = ut_st_open(BATCH, err, sizeof err);
    CHECK(f, "%s", err);
    if (m && f) {
        int checked = hfp_check_batch(m, f, "k_proj.bias");
        CHECK(checked == 95 && checked == m->params.n, "%d gradients checked of %d", checked, m->params.n);
        /* the padding row (pad_token_id 1) of the shared embedding takes no gradient */
        ut_tensor *w = ut_model_param(m, "model.shared.weight");
        const float *g = w ? m->params.flat_grad + m->params.segs[w->param_index].offset : NULL;
        for (int64_t c = 0; g && c < w->ne[1]; c++)
            CHECK(g[w->ne[1] + c] == 0.0f, "pad row gradient [%lld] %g", (long long)c, g[w->ne[1] + c]);
        CHECK(g && g[0] != 0.0f, "row 0 (<s>, in every row) has a gradient");
    }
    ut_st_close(f);
    ut_model_free(m);
}

/* Unpadded execution, and the padded path it keeps for a left-padded row */
static void test_left_padding_takes_the_padded_path(void) {
    char err[1024];
    ut_model *m = load(FIX "hf_bart_tiny", NULL, err, sizeof err);
    ut_st_file *f = ut_st_open(BATCH, err, sizeof err);
    CHECK(m && f, "%s", err);
    if (m && f) hfp_check_padded_path(m, f);
    ut_st_close(f);
    ut_model_free(m);
}

static void test_adamw_trainer_groups(void) {
    char err[1024];
    ut_model *m = load(FIX "hf_bart_tiny", NULL, err, sizeof err);
    ut_st_file *f = ut_st_open(BATCH, err, sizeof err);
    CHECK(m && f, "%s", err);
    if (m && f) hfp_check_adamw(m, f, "k_proj.bias");
    ut_st_close(f);
    ut_model_free(m);
}

/* training mode (every dropout of the fixture's config.json drawn):
 * activation checkpointing recomputes each encoder and decoder layer with the
 * same masks, so the gradients are bit-identical, and dropout changes the loss */
static void test_checkpointing_with_dropout(void) {
    hfp_check_checkpointing("bart", FIX "hf_bart_tiny", NULL, BATCH);
}

/* bf16 and fp16 autocast: finite loss, logits within 5% of transformers' float32 ones */
static void test_autocast(void) {
    hfp_check_autocast("bart", FIX "hf_bart_tiny", NULL, BATCH);
}

/* rows of one batch with different numbers of </s> (2): refused naming the
 * row; the same rows with one </s> each run */
static void test_eos_counts_differ(void) {
    char err[1024];
    ut_model *m = load(FIX "hf_bart_tiny", NULL, err, sizeof err);
    CHECK(m, "%s", err);
    int32_t x[2][3][4] = {{{0, 5, 2, 1}, {0}, {1, 1, 1, 0}}, {{0, 7, 8, 2}, {0}, {1, 1, 1, 1}}};
    for (int bad = 0; m && bad < 2; bad++) {
        if (bad) x[1][0][1] = 2; /* row 1 now holds two </s>, row 0 one */
        ut_ctx *ctx = ut_ctx_new(NULL);
        ut_tensor *logits = ut_model_forward(m, ctx, ut_tensor_from(ctx, UT_I32, 3, (int64_t[]){2, 3, 4}, x));
        if (!bad) CHECK(logits && logits->ne[0] == 2, "%s", ut_ctx_error(ctx));
        else
            CHECK(!logits && strstr(ut_ctx_error(ctx), "row 1 of the batch holds 2 </s>"), "%s", ut_ctx_error(ctx));
        ut_ctx_free(ctx);
    }
    ut_model_free(m);
}

/* dir/model.safetensors: hf_bart_tiny's tensors renamed by keep (NULL drops
 * one), plus the extra names (copies of model.shared.weight) */
static void write_variant(const char *dir, bool prefix, const char *const *extra) {
    char err[512], path[600];
    ut_st_file *f = ut_st_open(FIX "hf_bart_tiny/model.safetensors", err, sizeof err);
    UT_ASSERT(f);
    int n = 0, k = ut_st_count(f);
    const char *names[200];
    char buf[200][200];
    ut_st_tensor t[200];
    for (int i = 0; i < k; i++) {
        const char *nm = ut_st_name(f, i);
        if (strncmp(nm, "model.", 6)) continue; /* the head */
        snprintf(buf[n], sizeof buf[n], "%s", prefix ? nm : nm + 6);
        names[n] = buf[n], t[n] = *ut_st_get(f, nm), n++;
    }
    for (int i = 0; extra && extra[i]; i++) names[n] = extra[i], t[n++] = *ut_st_get(f, "model.shared.weight");
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    UT_ASSERT(ut_st_save(path, n, names, t, NULL, err, sizeof err) == 0);
    ut_st_close(f);
    snprintf(path, sizeof path, "%s/config.json", dir);
    hfp_copy_file(FIX "hf_bart_tiny/config.json", path, -1);
}

/* a bare BartModel (names without "model.", older files' embed_tokens
 * copies) and a prefixed one with a generation model's LM head: the same
 * weights, a new head (N(0, init_std) weights, zero biases) */
static void test_bare_model_new_head(void) {
    char d[256], err[1024];
    UT_ASSERT(tp_make_tmpdir(d, sizeof d, "hfbart"));
    const char *extra[2][4] = {{"encoder.embed_tokens.weight", "decoder.embed_tokens.weight", NULL},
                               {"lm_head.weight", NULL}};
    ut_model *full = load(FIX "hf_bart_tiny", NULL, err, sizeof err);
    for (int v = 0; v < 2; v++) {
        write_variant(d, v == 1, extra[v]);
        ut_model *bare = load(d, "3", err, sizeof err);
        CHECK(full && bare, "%s", err);
        if (!full || !bare) break;
        const char *same[] = {"model.shared.weight", "model.decoder.layers.1.encoder_attn.out_proj.weight",
                              "model.encoder.layernorm_embedding.bias"};
        for (int i = 0; i < 3; i++) {
            ut_tensor *a = ut_model_param(full, same[i]), *b = ut_model_param(bare, same[i]);
            CHECK(a && b && !memcmp(ut_f32(a), ut_f32(b), (size_t)ut_nelem(a) * sizeof(float)), "%s differs",
                  same[i]);
        }
        ut_tensor *w = ut_model_param(bare, "classification_head.out_proj.weight"),
                  *b = ut_model_param(bare, "classification_head.dense.bias");
        CHECK(w && w->ne[0] == 3 && w->ne[1] == 32, "out_proj (3, 32)");
        double ss = 0;
        for (int64_t i = 0; w && i < ut_nelem(w); i++) ss += (double)ut_f32(w)[i] * ut_f32(w)[i];
        double sd = w ? sqrt(ss / (double)ut_nelem(w)) : 0;
        CHECK(sd > 0.012 && sd < 0.028, "out_proj weight std %.4f, expected about 0.02", sd);
        CHECK(b && ut_f32(b)[0] == 0.0f && ut_f32(b)[31] == 0.0f, "dense bias zero");
        ut_model_free(bare);
    }
    ut_model_free(full);
    tp_finish(0, d);
}

/* a model built without model.pretrained starts as transformers' does: the
 * padding row of the shared embedding zero, the others N(0, init_std) */
static void test_random_init(void) {
    char err[512];
    ut_kv *kv = ut_kv_new();
    const char *o[][2] = {{"vocab_size", "50"},       {"d_model", "16"},
                          {"encoder_layers", "1"},    {"decoder_layers", "1"},
                          {"encoder_attention_heads", "2"}, {"decoder_attention_heads", "2"},
                          {"encoder_ffn_dim", "8"},   {"decoder_ffn_dim", "8"},
                          {"max_position_embeddings", "16"}};
    for (size_t i = 0; i < sizeof o / sizeof o[0]; i++) ut_kv_set(kv, o[i][0], o[i][1]);
    ut_model *m = ut_model_create("bart", kv, 3, err, sizeof err);
    CHECK(m, "%s", err);
    ut_tensor *w = m ? ut_model_param(m, "model.shared.weight") : NULL;
    for (int c = 0; w && c < 16; c++) CHECK(ut_f32(w)[16 + c] == 0.0f, "pad row [%d] %g", c, ut_f32(w)[16 + c]);
    CHECK(w && ut_f32(w)[0] != 0.0f && ut_model_param(m, "model.decoder.embed_positions.weight")->ne[0] == 18,
          "positions (16 + 2, 16)");
    ut_model_free(m);
    /* problem_type regression: the classification head has one output, as num_labels 1 gives; a
     * sequence-to-sequence model has no such head and refuses the key */
    ut_kv_set(kv, "problem_type", "regression");
    m = ut_model_create("bart", kv, 3, err, sizeof err);
    ut_tensor *head = m ? ut_model_param(m, "classification_head.out_proj.weight") : NULL;
    CHECK(head && head->ne[0] == 1, "regression head: %s", err);
    ut_model_free(m);
    ut_kv_set(kv, "task", "seq2seq");
    m = ut_model_create("bart", kv, 3, err, sizeof err);
    CHECK(!m && strstr(err, "model.problem_type: the classifier's") && strstr(err, "has no classifier"), "%s", err);
    ut_model_free(m);
    ut_kv_free(kv);
}

/* The BART tokenizer as save_pretrained writes it (tokenizer.json) and as
 * older directories hold it (vocab.json + merges.txt): transformers' ids for
 * every sentence of data/sst2_sample and for sentence pairs (<s> A </s></s> B </s>) */
static void check_tokenizer(const char *dir) {
    char err[512], *text = tp_slurp(FIX "hf_bart_tok_ids.txt");
    ut_tokenizer *tok = ut_tokenizer_load(dir, err, sizeof err);
    CHECK(tok && text, "%s: %s", dir, err);
    int rows = 0, pairs = 0;
    ut_tok_encoding e = {0};
    for (char *line = text, *next; tok && line && *line; line = next) {
        next = strchr(line, '\n');
        if (next) *next++ = 0;
        char *pair = strchr(line, '\t'), *ids = pair ? strchr(pair + 1, '\t') : NULL;
        UT_ASSERT(pair && ids);
        *pair++ = 0, *ids++ = 0;
        ut_tok_opts o = {.max_len = 0};
        int rc = ut_tokenizer_encode(tok, line, *pair ? pair : NULL, &o, &e, err, sizeof err);
        CHECK(rc == 0, "%s", err);
        char got[4096];
        size_t k = 0;
        for (int64_t i = 0; rc == 0 && i < e.len && k < sizeof got; i++)
            k += (size_t)snprintf(got + k, sizeof got - k, "%s%d", i ? " " : "", e.ids[i]);
        CHECK(rc == 0 && !strcmp(got, ids), "%s: '%s' '%s': %s, transformers %s", dir, line, pair, got, ids);
        rows++, pairs += *pair != 0;
    }
    CHECK(rows == 380 && pairs == 20, "%s: %d rows, %d pairs", dir, rows, pairs);
    ut_tok_encoding_free(&e);
    ut_tokenizer_free(tok);
    free(text);
}

static void test_tokenizer(void) {
    check_tokenizer(FIX "hf_bart_tiny");
    check_tokenizer(FIX "hf_bart_tok_files");
}

static void config_with(const char *dir, const char *from, const char *to) {
    hfp_config_with(FIX "hf_bart_tiny/config.json", dir, from, to);
}

static void test_bad_directories(void) {
    char d[256], p[600];
    UT_ASSERT(tp_make_tmpdir(d, sizeof d, "hfbartbad"));
    snprintf(p, sizeof p, "%s/model.safetensors", d);
    hfp_copy_file(FIX "hf_bart_tiny/model.safetensors", p, -1);
    config_with(d, "\"model_type\": \"bart\"", "\"model_type\": \"mbart\"");
    hfp_refused("bart", d, (const char *[]){"config.json", "model_type 'mbart'", NULL});
    config_with(d, "\"activation_function\": \"gelu\"", "\"activation_function\": \"swish\"");
    hfp_refused("bart", d, (const char *[]){"activation_function 'swish'", NULL});
    config_with(d, "\"is_decoder\"", "\"normalize_before\": true, \"is_decoder\"");
    hfp_refused("bart", d, (const char *[]){"config.json", "normalize_before true is not supported", NULL});
    config_with(d, "\"is_decoder\"", "\"add_final_layer_norm\": true, \"is_decoder\"");
    hfp_refused("bart", d, (const char *[]){"add_final_layer_norm true is not supported", NULL});
    config_with(d, "\"encoder_layerdrop\": 0.0", "\"encoder_layerdrop\": 0.1");
    hfp_refused("bart", d,
                (const char *[]){"encoder_layerdrop 0.1 is not supported", "model.encoder_layerdrop: 0", NULL});
    config_with(d, "\"d_model\": 32", "\"d_model\": 16");
    hfp_refused("bart", d,
                (const char *[]){"model.safetensors",
                                 "tensor 'model.shared.weight' has shape (538, 32), the model needs (538, 16)", NULL});
    config_with(d, "\"decoder_layers\": 2", "\"decoder_layers\": 3");
    hfp_refused("bart", d, (const char *[]){"'model.decoder.layers.2.self_attn.k_proj.weight' is missing", NULL});
    config_with(d, "\"pad_token_id\": 1", "\"pad_token_id\": 538");
    hfp_refused("bart", d, (const char *[]){"pad_token_id 538 is outside the vocabulary", NULL});
    hfp_check_cut_short("bart", d, FIX "hf_bart_tiny");
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
    RUN(test_eos_counts_differ);
    RUN(test_tokenizer);
    RUN(test_bare_model_new_head);
    RUN(test_random_init);
    RUN(test_bad_directories);
    return TEST_SUMMARY();
}
