/* Hugging Face T5: utrain's t5 loaded from T5ForConditionalGeneration
 * directories (tests/parity/fixtures/hf_t5_tiny: ReLU feed-forward, tied
 * head; hf_t5_tiny_gated: T5 v1.1's gated GELU and its own lm_head; made by
 * tests/parity/make_hf_t5_fixtures.py) gives transformers' relative-position
 * buckets, logits, loss and every parameter gradient on a batch of padded
 * sources (30 tokens: the logarithmic buckets) and targets, 10 AdamW steps,
 * and generate's tokens for greedy decoding and beam search, with and
 * without the decoder's cache; bad options and directories are refused. */
#include <string.h>

#include "proc.h"
#include "test.h"
#include "hf_parity.h"

#define FIX "tests/parity/fixtures/"

static const char *const models[2] = {FIX "hf_t5_tiny", FIX "hf_t5_tiny_gated"};
static const char *const batches[2] = {FIX "hf_t5_tiny_batch.safetensors", FIX "hf_t5_tiny_gated_batch.safetensors"};

static ut_model *load(int i, char *err, size_t n) { return hfp_load("t5", models[i], NULL, err, n); }

/* the buckets utrain computes in its inputs, against transformers' */
static void test_buckets(void) {
    char err[1024];
    ut_model *m = load(0, err, sizeof err);
    ut_st_file *f = ut_st_open(batches[0], err, sizeof err);
    CHECK(m && f, "%s", err);
    if (!m || !f) goto done;
    /* a batch of one 40-token source and target: the encoder's buckets (40 x 40) and the decoder's */
    int32_t x[4][40];
    for (int t = 0; t < 40; t++) x[0][t] = 5, x[1][t] = 1, x[2][t] = 7, x[3][t] = 1;
    ut_host_array h = {.dtype = UT_I32, .ndim = 3, .ne = {1, 4, 40}, .host = x};
    ut_inputs in = {0};
    CHECK(m->prepare(m, &h, &in, err, sizeof err) == 0, "%s", err);
    const char *names[2] = {"buckets.bi", "buckets.uni"};
    int at[2] = {2, 4}; /* the arrays of the encoder's and the decoder's buckets */
    for (int k = 0; k < 2 && in.n == 6; k++) {
        const ut_st_tensor *ref = ut_st_get(f, names[k]);
        CHECK(ref && ut_st_numel(ref) == 1600 && !memcmp(in.a[at[k]].host, ref->data, 1600 * sizeof(int32_t)),
              "%s differ from transformers'", names[k]);
    }
    ut_inputs_free(&in);
done:
    ut_st_close(f);
    ut_model_free(m);
}

/* Pipeline stages of 1, 2 and 1 blocks built from each directory: every
 * stage holds the same-named tensors of the whole model with its values,
 * the relative-position tables on each stage that runs a block of their
 * stack (the middle stage: both), the shared embedding on the first stage
 * and the tied head's copy of it on the last (both directories tie it:
 * T5's way, and transformers 5's for T5 v1.1); every whole tensor is on
 * some stage. */
static void test_pipeline_stages_load(void) {
    static const int blocks[3] = {1, 2, 1};
    for (int i = 0; i < 2; i++) {
        char err[1024];
        ut_model *whole = load(i, err, sizeof err), *stage[3] = {0};
        CHECK(whole, "%s", err);
        ut_kv *kv = ut_kv_new();
        ut_kv_set(kv, "pretrained", models[i]);
        for (int s = 0; s < 3; s++) {
            ut_model_layout lay = {.tp_size = 1, .pp_rank = s, .pp_size = 3, .pp_blocks = blocks};
            stage[s] = ut_model_create_layout("t5", kv, 7, UT_CPU, &lay, err, sizeof err);
            CHECK(stage[s], "stage %d: %s", s, err);
        }
        ut_kv_free(kv);
        if (!whole || !stage[0] || !stage[1] || !stage[2]) goto done;
        const char *rel[2] = {"encoder.block.0.layer.0.SelfAttention.relative_attention_bias.weight",
                              "decoder.block.0.layer.0.SelfAttention.relative_attention_bias.weight"};
        const bool want[3][2] = {{true, false}, {true, true}, {false, true}};
        for (int s = 0; s < 3; s++)
            for (int k = 0; k < 2; k++)
                CHECK((ut_model_param(stage[s], rel[k]) != NULL) == want[s][k], "%s: stage %d %s %s", models[i], s,
                      want[s][k] ? "lacks" : "holds", rel[k]);
        CHECK(ut_model_param(stage[0], "shared.weight") && !ut_model_param(stage[1], "shared.weight") &&
                  ut_model_param(stage[2], "shared.weight"),
              "%s: the shared embedding on the first stage and the tied head's copy on the last", models[i]);
        int found = 0;
        for (int p = 0; p < whole->params.n; p++) {
            const ut_tensor *w = whole->params.t[p];
            int64_t n = ut_nelem(w);
            float *a = ut_malloc_check((size_t)n * sizeof(float)), *b = ut_malloc_check((size_t)n * sizeof(float));
            ut_tensor_get(w, a, (size_t)n * sizeof(float));
            bool on_some = false;
            for (int s = 0; s < 3; s++) {
                const ut_tensor *t = ut_model_param(stage[s], whole->params.names[p]);
                if (!t) continue;
                on_some = true;
                ut_tensor_get(t, b, (size_t)n * sizeof(float));
                CHECK(ut_nelem(t) == n && !memcmp(a, b, (size_t)n * sizeof(float)), "%s: stage %d's %s differs",
                      models[i], s, whole->params.names[p]);
            }
            found += on_some;
            ut_free(a);
            ut_free(b);
        }
        CHECK(found == whole->params.n, "%s: %d of the %d tensors on the stages", models[i], found, whole->params.n);
    done:
        for (int s = 0; s < 3; s++) ut_model_free(stage[s]);
        ut_model_free(whole);
    }
}

static void test_logits_loss_grads(void) {
    for (int i = 0; i < 2; i++) {
        char err[1024];
        ut_model *m = load(i, err, sizeof err);
        ut_st_file *f = ut_st_open(batches[i], err, sizeof err);
        CHECK(m && f, "%s", err);
        if (m && f) {
            int checked = hfp_check_batch(m, f, NULL);
            CHECK(checked == m->params.n && checked == (i ? 51 : 47), "%s: %d gradients checked of %d", models[i],
                  checked, m->params.n);
        }
        ut_st_close(f);
        ut_model_free(m);
    }
}

static void test_adamw(void) {
    for (int i = 0; i < 2; i++) {
        char err[1024];
        ut_model *m = load(i, err, sizeof err);
        ut_st_file *f = ut_st_open(batches[i], err, sizeof err);
        CHECK(m && f, "%s", err);
        if (m && f) hfp_check_adamw(m, f, NULL);
        ut_st_close(f);
        ut_model_free(m);
    }
}

/* the cases of make_hf_t5_fixtures.py */
static const hfp_gen_case cases[] = {
    {"greedy", 1, UT_EARLY_HEURISTIC, 1.0, 0, 0, -1, -1, 12},
    {"beam4", 4, UT_EARLY_HEURISTIC, 1.0, 0, 0, -1, -1, 12},
    {"beam3_early_lp2_ngram2_min4", 3, UT_EARLY_TRUE, 2.0, 2, 4, -1, -1, 12},
    {"greedy_ngram3_min3", 1, UT_EARLY_HEURISTIC, 1.0, 3, 3, -1, 1, 12},
};

static void check_generation(bool no_cache) {
    for (int i = 0; i < 2; i++) {
        char err[1024];
        ut_model *m = load(i, err, sizeof err);
        ut_st_file *f = ut_st_open(batches[i], err, sizeof err);
        CHECK(m && f, "%s", err);
        if (m && f) hfp_check_generation(m, f, cases, (int)(sizeof cases / sizeof cases[0]), no_cache, 1);
        ut_st_close(f);
        ut_model_free(m);
    }
}

static void test_generate_cached(void) { check_generation(false); }
static void test_generate_uncached(void) { check_generation(true); }

/* A T5 v1.1 file as older transformers wrote it: tie_word_embeddings
 * false and an lm_head.weight of its own (here the shared embedding's
 * values), no scaling: the same logits and gradients as the gated
 * fixture's (transformers 5's tied head with scale_decoder_outputs false);
 * the lm_head takes the gradient the shared embedding's head part took. */
static void test_untied_head_file(void) {
    char d[256], err[1024], path[600];
    UT_ASSERT(tp_make_tmpdir(d, sizeof d, "hft5"));
    hfp_config_with(FIX "hf_t5_tiny_gated/config.json", d, "\"scale_decoder_outputs\": false,\n  \"tie_word_embeddings\": true",
                    "\"tie_word_embeddings\": false");
    ut_st_file *f = ut_st_open(FIX "hf_t5_tiny_gated/model.safetensors", err, sizeof err);
    UT_ASSERT(f);
    int k = ut_st_count(f);
    const char *names[64];
    ut_st_tensor t[64];
    for (int i = 0; i < k && i < 63; i++) names[i] = ut_st_name(f, i), t[i] = *ut_st_get(f, names[i]);
    names[k] = "lm_head.weight", t[k] = *ut_st_get(f, "shared.weight");
    snprintf(path, sizeof path, "%s/model.safetensors", d);
    UT_ASSERT(ut_st_save(path, k + 1, names, t, NULL, err, sizeof err) == 0);
    ut_st_close(f);
    ut_model *m = hfp_load("t5", d, NULL, err, sizeof err), *ref = load(1, err, sizeof err);
    ut_st_file *b = ut_st_open(batches[1], err, sizeof err);
    CHECK(m && ref && b && m->params.n == ref->params.n + 1, "%s", err);
    if (m && b && ref) {
        ut_ctx *ctx = ut_ctx_new(NULL);
        ut_ctx_set_training(ctx, false);
        ut_tensor *logits = ut_model_forward(m, ctx, pt_stored(ctx, ut_st_get(b, "input")));
        const ut_st_tensor *rl = ut_st_get(b, "logits");
        double e = logits ? pt_rel_err(ut_f32(logits), rl->data, ut_st_numel(rl)) : 1;
        CHECK(e < HFP_TOL, "logits with an lm_head of its own: relative error %.3g (%s)", e, ut_ctx_error(ctx));
        ut_ctx_free(ctx);
    }
    ut_st_close(b);
    ut_model_free(m);
    ut_model_free(ref);
    tp_finish(0, d);
}

/* options the model does not have, and other models' directories */
static void test_refusals(void) {
    char err[1024];
    ut_model *m = hfp_load("t5", models[0], (const char *const[]){"task", "sequence_classification", NULL}, err,
                           sizeof err);
    CHECK(!m && strstr(err, "not available for t5"), "%s", err);
    ut_model_free(m);
    m = hfp_load("t5", FIX "hf_bart_gen_tiny", NULL, err, sizeof err);
    CHECK(!m && strstr(err, "model_type"), "%s", err);
    ut_model_free(m);
    m = hfp_load("t5", models[0], (const char *const[]){"d_model", "32", NULL}, err, sizeof err);
    CHECK(!m && strstr(err, "d_model"), "%s", err);
    ut_model_free(m);
}

int main(void) {
    RUN(test_buckets);
    RUN(test_logits_loss_grads);
    RUN(test_pipeline_stages_load);
    RUN(test_adamw);
    RUN(test_generate_cached);
    RUN(test_generate_uncached);
    RUN(test_untied_head_file);
    RUN(test_refusals);
    return TEST_SUMMARY();
}
